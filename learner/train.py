"""The trainer: SFT, self-supervised and contrastive-RL stages over the farm, resumable.

    python -m learner train --config configs/demo.py [--config.rl.group_size=8 ...]

The flow, top-down (this module is the top; each stage and what it shares is a module of
`learner.stages`):

1. `train(cfg)` checks the stage list, initializes multi-host JAX, and opens the run
   (`stages.run.open_run`: workdir, tokenizer and policy, task set, exemplar database, metrics,
   and one frozen spec per stage built from the config, `stages.specs`).
2. `stages.programs.measure_known_programs` scores the task set's known programs on the farm
   once (with `sft.measure_targets`): their speedups seed the exemplar buckets and the frozen
   exemplars.
3. each configured stage runs through `_run_stage`: skip it when its last checkpoint is final,
   else restore (or start) its state (`stages.state`), drop exemplar rows newer than that
   checkpoint, start the farm when the stage scores samples, and call the stage's function
   from `STAGES`:

   * sft      (`stages.sft`) masked cross-entropy on (prompt, correct code) pairs.
   * selfsup  (`stages.selfsup`) sample codes for every task, score them on the farm, train
              only on the successes (reward 1/0, no baseline); `rounds` x (sample, score,
              `passes` updates over all of the round's successes).
   * rl       (`stages.rl`) contrastive RL: each task's prompt carries `num_exemplars` earlier
              kernels drawn from its score buckets with their speedups; `group_size` responses
              per prompt are scored and every success enters the buckets; GRPO update with a KL
              penalty to the stage's starting policy, optionally overlapping sampling and scoring.

   then evaluates the stage's final policy under every configured prompt form
   (`stages.evaluate.eval_stage`).
4. `stages.evaluate.final_report` writes the report over the stages' evaluations.

One jitted step (`learner.runtime.train_step`) with a pluggable loss serves every stage.
`learner.rl.rewards` owns the outcome-to-reward rule (INFRA_ERROR and LOST are left out of the
update).

Steps are numbered globally across the pipeline (stage offsets follow from the config), and
every scored sample is stored in the exemplar database with the global step that consumed it.
Resuming restores each stage's latest checkpoint and deletes database rows newer than it, so
the database always matches the weights; sample ids are deterministic, so nothing is counted
twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from learner.runtime import controller
from learner.runtime.distributed import distributed_config, maybe_initialize_distributed
from learner.runtime.train_step import TrainState
from learner.stages.evaluate import eval_pending, eval_stage, final_report
from learner.stages.programs import measure_known_programs
from learner.stages.rl import run_rl
from learner.stages.run import Run, open_run
from learner.stages.selfsup import run_selfsup
from learner.stages.sft import run_sft
from learner.stages.specs import StageSpec, stage_list
from learner.stages.state import final_params, stage_done, stage_state

log = logging.getLogger(__name__)


def train(cfg: Any) -> dict[str, Path]:
    """Run (or resume) the configured pipeline; returns the report's paths."""
    stage_list(cfg)  # a bad stage list is refused before anything starts
    if maybe_initialize_distributed(distributed_config(cfg)):
        log.info("process %d of %d%s", jax.process_index(), jax.process_count(),
                 " (the controller: farm, exemplar database, metrics, report)" if controller.is_controller() else "")
    run = open_run(cfg)
    try:
        measure_known_programs(run)  # once, before any stage: they seed the exemplar buckets
        for spec in run.specs.values():
            _run_stage(run, spec)
        paths = controller.share("report", lambda: final_report(run, run.stages))
        controller.barrier("end")
        return paths
    finally:
        run.close()


def _run_stage(run: Run, spec: StageSpec) -> None:
    """Run one stage from its latest checkpoint (or its start) to its last step, then evaluate it.

    Every process reads the checkpoints (orbax restores collectively); process 0 alone answers
    from its files and database (whether the stage is evaluated, which rows to drop)."""
    if stage_done(run, spec.name):
        run.policy.release()  # the initial weights start only the first stage
        log.info("stage %s already complete", spec.name)
        if _eval_pending(run, spec.name):  # restore the params only when they are needed
            eval_stage(run, spec.name, final_params(run, spec.name))
        return
    state, reference, restored = stage_state(run, spec.name, run.stages)
    run.policy.release()  # handed to this stage, or not needed: later stages start from checkpoints
    dropped = controller.share("truncate", lambda: run.db.truncate_after(spec.offset + restored))
    if dropped:
        log.info("resume: dropped %d database rows newer than the checkpoint", dropped)
    log.info("stage %s: step %d of %d", spec.name, restored, spec.steps)
    if spec.uses_farm:
        controller.share("farm", run.start_farm)  # a farm that cannot start stops every process
    state = STAGES[spec.name](run, spec, state, reference, restored)
    del reference
    if _eval_pending(run, spec.name):
        eval_stage(run, spec.name, state.params)


def _eval_pending(run: Run, stage: str) -> bool:
    return controller.share("eval-pending", lambda: eval_pending(run, stage))


# the stages, in pipeline order: (run, spec, state, RL's reference params or None, step restored)
# -> final state; `spec` is the stage's own StageSpec
StageFn = Callable[[Run, Any, TrainState, Any, int], TrainState]
STAGES: dict[str, StageFn] = {"sft": run_sft, "selfsup": run_selfsup, "rl": run_rl}  # in pipeline order
