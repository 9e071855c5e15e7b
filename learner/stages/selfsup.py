"""The self-supervised stage: `rounds` x (sample codes for every task under the plain prompt, score
them on the farm, take `passes` steps over all of the round's successes); reward 1/0, no
baseline. The paper's one update per round is `passes = 1`."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from learner.lm.sampler import Sampler
from learner.rl.rewards import rewards
from learner.rl.rollout import generate_rollouts, lm_batch
from learner.runtime import scale
from learner.runtime.train_step import TrainState
from learner.stages.run import Run
from learner.stages.samples import (
    jax_key,
    length_metrics,
    make_sampler,
    outcome_metrics,
    sample_records,
    score_rollouts,
    sft_prompts,
    wait_outcomes,
)
from learner.stages.sft import lm_loss
from learner.stages.specs import SelfSupSpec
from learner.stages.state import advance, checkpointer, progress, save_checkpoint

log = logging.getLogger(__name__)


def run_selfsup(run: Run, spec: SelfSupSpec, state: TrainState, reference: Any, start: int) -> TrainState:
    """`spec.rounds` rounds of `spec.passes` steps each: sample, score, update on the successes."""
    sampler = make_sampler(run, state.params)
    loss_fn = lm_loss()
    k = spec.passes
    with checkpointer(run, spec.name) as ck, progress(run, spec.rounds, start // k, spec.name) as bar:
        for rnd in range(start // k, spec.rounds):
            state, m = _selfsup_round(run, spec, state, sampler, rnd, loss_fn)
            run.writer.write(spec.offset + rnd * k + k, m, stage=spec.name)
            bar.set_postfix(success=f"{m['success_rate']:.2f}")
            bar.update(1)
            save_checkpoint(ck, state, spec.checkpoint_every, spec.steps)
    return state


def _selfsup_round(run: Run, spec: SelfSupSpec, state: TrainState, sampler: Sampler, rnd: int,
                   loss_fn: Any) -> tuple[TrainState, dict[str, float]]:
    """Sample `spec.samples_per_task` codes per task, score them, store them, and take
    `spec.passes` steps over the successes (or advance the step count when there are none)."""
    k = spec.passes
    gstep = spec.offset + rnd * k
    prompts = sft_prompts(run, f"selfsup-{gstep}", spec.samples_per_task)
    rollouts, gen = generate_rollouts(
        sampler, run.tokenizer, prompts, run.sampling(), jax_key(run, gstep, 1),
        policy_version=gstep, batch_size=int(run.cfg.sampling.batch_size))
    ids = score_rollouts(run, rollouts, "selfsup")
    outcomes, waited = wait_outcomes(run, rollouts, ids)
    given = rewards([outcomes[r.sample_id] for r in rollouts], spec.reward)
    reward_of = {r.sample_id: g for r, g in zip(rollouts, given, strict=True)}
    run.store(sample_records(rollouts, outcomes, reward_of, gstep + k, "selfsup"))
    wins = [(r.prompt_ids, r.completion_ids) for r in rollouts if outcomes[r.sample_id].ok]
    m = outcome_metrics([outcomes[r.sample_id] for r in rollouts])
    m.update(tokens_per_s=gen.tokens_per_s, farm_wait_s=waited, successes_trained=len(wins),
             learning_rate=spec.optimizer.learning_rate, **length_metrics(rollouts))
    if not wins:
        log.info("self-supervised round %d: no successes; no update", rnd)
        return advance(state, k), m
    # one update per pass over all of the round's successes (rows padded with empty,
    # masked-out completions to a multiple of batch_size: few compiled shapes)
    rows = list(wins) + [(wins[0][0], [])] * (-len(wins) % spec.batch_size)
    losses = []
    for _ in range(k):
        state, lm = scale.step(state, lm_batch(rows, run.policy.pad_id, int(run.cfg.max_seq_len)),
                               loss_fn, scale.micro_batch_tokens(run.cfg))
        losses.append(float(lm["loss"]))
    m["loss"] = float(np.mean(losses))
    sampler.update_params(state.params)
    return state, m
