"""The model stack: decoder model (config, model, attention, rope), checkpoint and tokenizer I/O
(hf_io, tokenizer; vocab: a small BPE fitted to the task suite for models trained from
scratch), mesh sharding (sharding) and generation (sampler, engine). Nothing here knows about
tasks, the farm or RL; the trainer's side of `learner` builds on it."""
