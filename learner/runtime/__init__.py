"""How the trainer runs a model on its devices, whatever the stage: the initial policy (policy),
the generic jitted step and its losses (train_step, losses), micro-batches (microbatch), the
step at scale (scale: batches on the mesh, micro-batches sized by tokens, the memory plan at
start), the per-device memory plan (device_memory), orbax checkpoints (checkpoint), multi-host
start-up (distributed) and the compilation cache (compile_cache). Builds on `learner.lm`;
nothing here knows about tasks, the farm or RL rewards."""
