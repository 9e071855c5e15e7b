"""The trainer's stages and what they share; `learner.train` runs them in order.

One module per stage (sft, selfsup, rl) holds its loop: (run, spec, state, RL's reference params
or None, step restored) -> final state. Around them: what each stage reads from the config
(specs), what the stages share in one process (run), the known programs and their measured
speedups (programs), a stage's state across checkpoints (state), from a policy to scored
samples (samples), and the evaluation of each stage's policy with the final report (evaluate).
Builds on `learner.rl`, `learner.runtime`, `learner.lm` and `learner.report`."""
