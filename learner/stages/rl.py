"""The contrastive-RL stage: each step, the prompts of `tasks_per_step` tasks carry `num_exemplars`
earlier kernels drawn from their score buckets with their speedups; `group_size` responses per
prompt are scored and every success enters the buckets; one GRPO update with a KL penalty to the
stage's starting policy. With `overlap`, the sampler produces step t+1 while the farm scores step
t (the importance ratio uses the behaviour log-probs)."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import jax
import numpy as np

from learner.config_check import TrainConfigError
from learner.lm.sampler import Sampler
from learner.rl.exemplars import sample_random_exemplars
from learner.rl.farm import one_model_per_group
from learner.rl.grpo import group_advantages, make_grpo_loss
from learner.rl.prompts import Exemplar
from learner.rl.reference import batch_reference_logprobs
from learner.rl.rewards import rewards
from learner.rl.rollout import Prompt, Rollout, generate_rollouts, grpo_batch, repeat_prompt
from learner.rl.tasks import TaskInfo
from learner.runtime import controller, scale
from learner.runtime.train_step import TrainState
from learner.stages.run import Run
from learner.stages.samples import (
    jax_key,
    length_metrics,
    make_sampler,
    np_rng,
    outcome_metrics,
    prompt_ids,
    sample_records,
    score_rollouts,
    wait_outcomes,
)
from learner.stages.specs import RLSpec
from learner.stages.state import checkpointer, progress, save_checkpoint

log = logging.getLogger(__name__)


def run_rl(run: Run, spec: RLSpec, state: TrainState, reference: Any, start: int) -> TrainState:
    """`spec.steps` GRPO steps. `reference`: the frozen reference policy (`stage_state`), None
    when rl.grpo.kl_coef is 0. With overlap, step t+1's samples are drawn while the farm scores
    step t's."""
    loss_fn = make_grpo_loss(spec.grpo)
    sampler = make_sampler(run, state.params)
    overlap = _rl_overlap(run, spec)
    pending: _Batch | None = None
    with checkpointer(run, spec.name) as ck, progress(run, spec.steps, start, spec.name) as bar:
        step_start = time.perf_counter()
        for step in range(start, spec.steps):
            gstep = spec.offset + step
            version = spec.offset + int(jax.device_get(state.step))
            batch = pending if pending is not None else _rl_generate(run, spec, sampler, gstep, version)
            pending = None
            if overlap and step + 1 < spec.steps:  # the sampler works while the farm scores `batch`
                pending = _rl_generate(run, spec, sampler, gstep + 1, version)
            state, m = _rl_update(run, spec, state, reference, batch, gstep, version, sampler, loss_fn)
            now = time.perf_counter()
            m["step_s"], step_start = now - step_start, now  # wall time since the previous step ended
            run.writer.write(gstep + 1, m, stage=spec.name)
            bar.set_postfix(success=f"{m['success_rate']:.2f}", reward=f"{m['reward_mean']:.2f}")
            bar.update(1)
            save_checkpoint(ck, state, spec.checkpoint_every, spec.steps)
    if pending is not None and controller.is_controller():  # pragma: no cover - only when the loop exits early
        run.farm.wait(pending.ids, 60.0)
    return state


def _rl_overlap(run: Run, spec: RLSpec) -> bool:
    """Whether RL samples step t+1 while the farm scores step t (rl.overlap; "auto": unless the
    local farm times kernels on this machine's CPU cores)."""
    overlap = spec.overlap == "on" or (spec.overlap == "auto" and not controller.share(
        "farm-shares-cpu", lambda: run.farm.shares_cpu_with_learner))
    if spec.overlap == "auto" and not overlap:
        log.warning("rl.overlap is off: the local farm times kernels on this machine's CPU cores, and "
                    "sampling at the same time would distort its speedups (force with rl.overlap=on)")
    return overlap


@dataclasses.dataclass
class _Batch:
    rollouts: list[Rollout]
    ids: list[str]
    gen_tokens_per_s: float
    generate_s: float
    num_exemplars: float


def _rl_generate(run: Run, spec: RLSpec, sampler: Sampler, gstep: int, version: int) -> _Batch:
    """Sample global step `gstep`'s groups and submit them to the farm."""
    prompts, shown = _rl_prompts(run, spec, gstep)
    if not prompts:
        raise TrainConfigError("no RL prompt fits max_seq_len - sampling.max_new_tokens")
    rollouts, gen = generate_rollouts(sampler, run.tokenizer, prompts, run.sampling(),
                                      jax_key(run, gstep, 4), policy_version=version,
                                      batch_size=int(run.cfg.sampling.batch_size))
    ids = score_rollouts(run, rollouts, "rl")
    return _Batch(rollouts, ids, gen.tokens_per_s, gen.seconds, shown)


def _rl_update(run: Run, spec: RLSpec, state: TrainState, reference: Any, batch: _Batch, gstep: int,
               version: int, sampler: Sampler, loss_fn: Any) -> tuple[TrainState, dict[str, float]]:
    """Wait for `batch`'s outcomes, store them, take one GRPO step on them, and hand the new
    params to the sampler. Samples without
    a reward (`rewards`: INFRA_ERROR, LOST) or measured on another GPU model than the rest of
    their group (`one_model_per_group`) are left out."""
    outcomes, waited = wait_outcomes(run, batch.rollouts, batch.ids)
    rollouts = batch.rollouts
    got = [outcomes[r.sample_id] for r in rollouts]
    given = rewards(got, spec.reward)
    valid = np.array([g is not None for g in given])
    reward = np.array([0.0 if g is None else g for g in given], np.float32)
    groups = np.array([r.group for r in rollouts])
    valid &= np.array(one_model_per_group(got, groups.tolist()))
    adv = group_advantages(reward, groups, valid, spec.grpo)
    reward_of = {r.sample_id: (float(reward[i]) if valid[i] else None) for i, r in enumerate(rollouts)}
    run.store(sample_records(rollouts, outcomes, reward_of, gstep + 1, "rl"))
    mbt = scale.micro_batch_tokens(run.cfg)
    b = grpo_batch(rollouts, adv, valid, run.policy.pad_id, int(run.cfg.max_seq_len))
    t_ref = time.perf_counter()
    b["ref_logprobs"] = (batch_reference_logprobs(state, reference, b, mbt)
                         if spec.grpo.kl_coef > 0 else np.zeros_like(b["old_logprobs"]))
    t0 = time.perf_counter()
    ref_s = t0 - t_ref
    state, lm = scale.step(state, b, loss_fn, mbt)
    sampler.update_params(state.params)
    m = {k: float(v) for k, v in jax.device_get(lm).items()}
    m.update(outcome_metrics(got))
    m.update(reward_mean=float(reward[valid].mean()) if valid.any() else 0.0,
             adv_mean=float(adv[valid].mean()) if valid.any() else 0.0,
             adv_std=float(adv[valid].std()) if valid.any() else 0.0,
             infra_excluded=int((~valid).sum()), tokens_per_s=batch.gen_tokens_per_s, generate_s=batch.generate_s,
             farm_wait_s=waited, update_s=time.perf_counter() - t0, reference_s=ref_s,
             staleness=float(version - np.mean([r.policy_version for r in rollouts])),
             exemplars_in_prompt=batch.num_exemplars, learning_rate=spec.optimizer.learning_rate,
             **length_metrics(rollouts))
    return state, m


def _exemplars(run: Run, spec: RLSpec, task: TaskInfo, rng: np.random.Generator) -> list[Exemplar]:
    """Earlier kernels for the task's contrastive prompt (none for plain GRPO): drawn by the
    paper's bucket rule, or uniformly among the task's distinct successful codes ("random")."""
    n = spec.num_exemplars
    if n <= 0:
        return []
    if spec.exemplar_rule == "random":
        return sample_random_exemplars(run.db, task.task_id, n, rng)
    return run.db.sample_exemplars(task.task_id, n, spec.tau, rng)


def _rl_prompts(run: Run, spec: RLSpec, gstep: int) -> tuple[list[Prompt], float]:
    """`spec.group_size` samples of the contrastive prompt of each of `spec.tasks_per_step` RL
    tasks drawn for global step `gstep`, and the mean number of exemplars shown. Process 0 draws
    the tasks and their exemplars from its database; every process builds the same prompts."""
    tasks = run.rl_tasks
    out, shown = [], []
    for g, (ti, exemplars) in enumerate(controller.share("rl-exemplars", lambda: _draw(run, spec, gstep))):
        task = tasks[ti]
        fitted = prompt_ids(run, task, exemplars)
        if fitted is None:
            continue
        ids, n_shown = fitted
        shown.append(n_shown)
        out += repeat_prompt(f"rl-{gstep}", task.task_id, g, ids, spec.group_size)
    return out, float(np.mean(shown)) if shown else 0.0


def _draw(run: Run, spec: RLSpec, gstep: int) -> list[tuple[int, list[Exemplar]]]:
    """The RL tasks of global step `gstep` (indices into `run.rl_tasks`, ascending) and the
    exemplars drawn for each, from one random stream seeded by the step."""
    rng = np_rng(run, gstep, 3)
    tasks = run.rl_tasks
    chosen = rng.choice(len(tasks), size=min(spec.tasks_per_step, len(tasks)), replace=False)
    return [(ti, _exemplars(run, spec, tasks[ti], rng)) for ti in sorted(int(i) for i in chosen)]
