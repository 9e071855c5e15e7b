"""The model stack: decoder model (config, model, attention, rope), checkpoint and tokenizer I/O
(hf_io, tokenizer), mesh sharding (sharding) and generation (sampler). Nothing here knows about
tasks, the farm or RL; the trainer's side of `learner` builds on it."""
