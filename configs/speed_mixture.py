"""The speed-mixture experiment: can SFT, self-supervised, plain GRPO and contrastive RL be told
apart at our scale?

    learner experiment --config configs/speed_mixture.py                 # GPU host: 3 seeds
    learner experiment --config configs/speed_mixture.py --config.experiment.short=True   # CI size

Per task the SFT data holds several programs of different speeds (the reference renamed, ~1x; a
copy that computes everything twice, ~0.5x; the shipped fast variant; a shipped wrong variant),
so after SFT the policy samples all of them and GRPO has a reward spread to work with. Two tasks
are held out of RL, and their fast program never appears in training: only as an exemplar in
the evaluation prompt. From one SFT + self-supervised checkpoint the experiment branches into
plain GRPO (no exemplars), contrastive RL with random exemplars, and contrastive RL with the
paper's bucket exemplars, each for `experiment.seeds` seeds, and writes <workdir>/report.* with
bootstrap intervals over (task, seed) cells (docs/experiments.md).
"""

from __future__ import annotations

import ml_collections

from configs.common import base_config

RL_TASKS = "L1/1,L1/2,L1/4,L2/6,L2/7,L2/3"
HELDOUT = "L1/8,L2/5"


def get_config():
    c = base_config()
    c.workdir = "runs/speed_mixture"
    c.tasks.ids = f"{RL_TASKS},{HELDOUT}"
    c.tasks.heldout = HELDOUT
    c.tasks.programs = "mixture"
    c.tasks.variant_device = "any"  # torch-only variants: nothing to compile, same programs on CPU and GPU
    c.max_seq_len = 1408
    c.sampling.max_new_tokens = 320
    c.sampling.batch_size = 32
    c.sft.steps = 300
    c.sft.batch_size = 16
    c.sft.learning_rate = 3e-3
    c.sft.decay_steps = 100  # warmup-stable-decay: responses parse at T=1 (docs/training.md)
    c.sft.checkpoint_every = 100
    c.selfsup.rounds = 2
    c.selfsup.samples_per_task = 4
    c.selfsup.batch_size = 16
    c.selfsup.learning_rate = 3e-4
    c.rl.steps = 12
    c.rl.tasks_per_step = 6
    c.rl.group_size = 8
    c.rl.learning_rate = 2e-4  # 5e-4 with KL 0.01 broke the demo's policy in 2 of 3 runs (docs/experiments.md)
    c.rl.num_exemplars = 2
    c.rl.grpo.kl_coef = 0.04
    c.eval.samples_per_task = 6
    c.farm.options.num_correctness_inputs = 20
    c.farm.options.timing_budget_s = 0.5
    c.checkpoint_every = 5

    c.experiment = ml_collections.ConfigDict()  # the RL arms and seeds compared (learner.experiment)
    c.experiment.seeds = 3  # seeds per arm, each a full RL stage from the shared base
    c.experiment.arms = "grpo,random,bucket"  # plain GRPO, random exemplars, bucket exemplars
    c.experiment.short = False  # True: the CI-sized version (minutes on 2 CPU cores, 1 seed)
    c.experiment.report_only = False  # True: only (re)write the report from the runs that finished
    return c


def shorten(c: ml_collections.ConfigDict) -> None:
    """The CI-sized experiment: same design, a few steps, one seed, fewer samples."""
    c.tasks.ids = "L1/2,L2/6,L1/8"
    c.tasks.heldout = "L1/8"
    c.max_seq_len = 1152
    c.sampling.max_new_tokens = 256
    c.sampling.batch_size = 8
    c.sft.steps = 150
    c.sft.decay_steps = 50
    c.sft.batch_size = 8
    c.selfsup.rounds = 1
    c.selfsup.samples_per_task = 2
    c.selfsup.batch_size = 4
    c.rl.steps = 2
    c.rl.tasks_per_step = 2
    c.rl.group_size = 4
    c.eval.samples_per_task = 2
    c.farm.options.num_correctness_inputs = 10
    c.farm.options.timing_budget_s = 0.5
    c.experiment.seeds = 1
    c.progress = False
