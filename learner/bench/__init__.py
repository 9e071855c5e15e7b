"""The learner's benchmarks, each a `python -m learner.bench.<module>` command (docs/benchmarks.md):
training MFU and decode throughput (throughput; also `learner bench`), one GRPO step end to end
(rl_step), static against continuous batching (rollout), the decode step against its rows
(decode_rows), several GPUs of one host (scaling); shared flags in args. Only the CLI imports
this package: a training run never loads it."""
