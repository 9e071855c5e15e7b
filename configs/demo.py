"""The end-to-end demo: SFT, self-supervised and contrastive RL of a tiny model on the built-in suite.

    make demo            # = python -m learner train --config configs/demo.py

On a machine without a GPU it trains a ~0.5M-parameter model from scratch (tokenizer fitted to
the suite) on six built-in tasks, scoring every sampled kernel on a real `evalfarm` daemon the
learner starts on loopback (CPU mode, 20 correctness inputs, 1 s timing budget). About 10 minutes
on 2 cores. Expected: SFT teaches the response protocol and the shipped fast variants, so most
samples after SFT parse and pass (success 60-100%, speedups of the variants, 1.2-10x on CPU);
the later stages keep or raise that. It prints the paper's table for each stage and writes
runs/demo/report.{txt,md,json,png}. With a GPU the same command scores on it.
Kill it at any point and run the same command again: it resumes.
"""

from __future__ import annotations

from configs.common import base_config

DEMO_TASKS = "L1/1,L1/2,L1/4,L2/6,L2/7,L2/3"


def get_config():
    c = base_config()
    c.workdir = "runs/demo"
    c.tasks.ids = DEMO_TASKS
    c.max_seq_len = 1152
    c.sampling.max_new_tokens = 256
    c.sampling.batch_size = 12
    c.sft.steps = 120
    c.sft.batch_size = 6
    c.sft.learning_rate = 3e-3
    c.selfsup.rounds = 1
    c.selfsup.samples_per_task = 2
    c.selfsup.steps_per_round = 10
    c.selfsup.batch_size = 6
    c.selfsup.learning_rate = 3e-4
    c.rl.steps = 5
    c.rl.tasks_per_step = 3
    c.rl.group_size = 4
    c.rl.learning_rate = 1e-4
    c.eval.samples_per_task = 2
    c.farm.options.num_correctness_inputs = 20
    c.farm.options.timing_budget_s = 1.0
    c.checkpoint_every = 1
    return c
