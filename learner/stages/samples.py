"""From a policy to scored samples, for every stage that samples and for evaluation: the sampler
over the current params, prompt token ids that fit `max_seq_len - max_new_tokens`, submitting
rollouts to the farm and waiting for their outcomes, a batch's database records and metrics, and
the random streams seeded per global step. Across processes, process 0 submits and waits, and the
outcomes reach every process (`learner.runtime.controller.share`)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from learner.config_check import TrainConfigError
from learner.lm.engine import ContinuousSampler
from learner.lm.sampler import Sampler
from learner.rl.exemplars import SampleRecord
from learner.rl.farm import FarmOutcome, Outcome
from learner.rl.prompts import PROMPT_VERSION, Exemplar, contrastive_prompt, sft_prompt
from learner.rl.rollout import Prompt, Rollout, repeat_prompt
from learner.rl.tasks import TaskInfo
from learner.runtime import controller
from learner.stages.run import Run

log = logging.getLogger(__name__)


def make_sampler(run: Run, params: Any) -> Sampler:
    model = nnx.merge(run.policy.graphdef, params)
    s = run.cfg.sampling
    steps_per_check = int(s.steps_per_check)
    if str(s.engine) == "continuous":
        if jax.process_count() > 1:
            raise TrainConfigError("sampling.engine=continuous runs in one process; use static in multi-host runs")
        return ContinuousSampler(model, rows=int(s.batch_size), chunk=int(s.engine_chunk),
                                 pad_id=run.policy.pad_id, min_bucket=64, mesh=run.policy.mesh,
                                 steps_per_check=steps_per_check)
    return Sampler(model, pad_id=run.policy.pad_id, min_bucket=64, mesh=run.policy.mesh,
                   steps_per_check=steps_per_check)


def _contrastive(run: Run, task: TaskInfo, exemplars: Sequence[Exemplar]) -> str:
    return contrastive_prompt(task.source, exemplars, order=str(run.cfg.rl.exemplar_order), seed=int(run.cfg.seed))


def prompt_ids(run: Run, task: TaskInfo, exemplars: list[Exemplar] | None) -> tuple[list[int], int] | None:
    """Token ids of the task's prompt that fit `max_seq_len - max_new_tokens`, and the number of
    exemplars shown. `exemplars=None`: the SFT prompt; a list: the contrastive prompt, dropping the
    weakest exemplars until it fits. None when even the smallest form does not fit."""
    if exemplars is None:
        ids = run.encode_prompt(sft_prompt(task.source))
    else:
        ids = run.encode_prompt(_contrastive(run, task, exemplars))
        while len(ids) > run.max_prompt_len() and exemplars:
            exemplars = sorted(exemplars, key=lambda e: (e.speedup, e.code))[1:]
            ids = run.encode_prompt(_contrastive(run, task, exemplars))
    if len(ids) > run.max_prompt_len():
        log.warning("prompt for %s is %d tokens > %d; skipped", task.task_id, len(ids), run.max_prompt_len())
        return None
    return ids, len(exemplars or [])


def sft_prompts(run: Run, prefix: str, per_task: int) -> list[Prompt]:
    out = []
    for g, t in enumerate(run.tasks):
        fitted = prompt_ids(run, t, None)
        if fitted is not None:
            out += repeat_prompt(prefix, t.task_id, g, fitted[0], per_task)
    return out


def score_rollouts(run: Run, rollouts: Sequence[Rollout], stage: str) -> list[str]:
    """Submit the parsed ones (process 0; the others submit nothing); returns their sample ids."""
    items = [(r.sample_id, r.task_id, r.code,
              {"task": r.task_id, "stage": stage, "policy_version": str(r.policy_version)})
             for r in rollouts if r.code]
    if not controller.is_controller():
        return [sid for sid, *_ in items]
    run.farm.check_step_size(len(rollouts))
    return run.farm.submit_many(items, seed=rollouts[0].sample_id if rollouts else 0)


def wait_outcomes(run: Run, rollouts: Sequence[Rollout], ids: Sequence[str]) -> tuple[dict[str, FarmOutcome], float]:
    """Wait (bounded) for the farm; parse failures become PARSE_FAILURE outcomes. Process 0 waits,
    every process gets its outcomes and its wait."""

    def wait() -> tuple[dict[str, FarmOutcome], float]:
        t0 = time.perf_counter()
        got = run.farm.wait(ids, float(run.cfg.farm.wait_timeout_s)) if ids else {}
        return got, time.perf_counter() - t0

    got, waited = controller.share("outcomes", wait)
    for r in rollouts:
        if not r.code:
            got[r.sample_id] = FarmOutcome(r.sample_id, Outcome.PARSE_FAILURE, detail=r.parse_failure)
    return got, waited


def sample_records(rollouts: Sequence[Rollout], outcomes: dict[str, FarmOutcome], reward_of: dict[str, float | None],
             step: int, stage: str) -> list[SampleRecord]:
    out = []
    for r in rollouts:
        o = outcomes[r.sample_id]
        out.append(SampleRecord(
            sample_id=r.sample_id, task_id=r.task_id, code=r.code, verdict=o.verdict,
            speedup=o.speedup, reward=reward_of.get(r.sample_id), policy_version=r.policy_version,
            step=step, stage=stage, prompt_version=PROMPT_VERSION,
            detail=(o.hack_reason or o.detail or r.parse_failure)[:500],
        ))
    return out


def outcome_metrics(outcomes: Sequence[FarmOutcome]) -> dict[str, float]:
    n = len(outcomes)
    verdicts = Counter(o.verdict for o in outcomes)
    speedups = [o.speedup for o in outcomes if o.ok and o.speedup is not None]
    m: dict[str, float] = {f"verdict/{v}": c for v, c in verdicts.items()}
    m["samples"] = n
    m["success_rate"] = len(speedups) / n if n else 0.0
    m["hacks"] = verdicts.get(Outcome.HACK_DETECTED, 0)
    lat = [o.latency_s for o in outcomes if o.verdict is not Outcome.PARSE_FAILURE]
    if lat:
        m["farm_latency_s"] = float(np.mean(lat))
    if speedups:
        m.update(speedup_mean=float(np.mean(speedups)), speedup_median=float(np.median(speedups)),
                 speedup_max=float(np.max(speedups)))
    for o in outcomes:
        if o.verdict is Outcome.PARSE_FAILURE:
            m[f"parse_failure/{o.detail}"] = m.get(f"parse_failure/{o.detail}", 0) + 1
    return m


def length_metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """Response lengths and the share cut off by max_new_tokens."""
    if not rollouts:
        return {}
    lengths = [len(r.completion_ids) for r in rollouts]
    return {"response_len_mean": float(np.mean(lengths)), "response_len_max": float(np.max(lengths)),
            "truncation_rate": float(np.mean([r.finish_reason == "length" for r in rollouts]))}


def np_rng(run: Run, step: int, salt: int) -> np.random.Generator:
    return np.random.default_rng([int(run.cfg.seed), step, salt])


def jax_key(run: Run, step: int, salt: int) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(int(run.cfg.seed)), step), salt)
