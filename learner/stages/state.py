"""A stage's state across checkpoints: where it starts (the previous stage's final params,
`init_from`, or the policy's initial weights), what a checkpoint restores into (an abstract
template), whether it is done, when it saves; and the progress bar of its loop."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
from flax import nnx
from tqdm import tqdm

from learner.config_check import STAGES as STAGE_ORDER
from learner.config_check import TrainConfigError
from learner.rl.reference import reference_copy, reference_dtype
from learner.runtime import controller
from learner.runtime.checkpoint import Checkpointer
from learner.runtime.train_step import (
    TrainState,
    abstract_train_state,
    create_train_state,
    make_optimizer,
)
from learner.stages.run import Run
from learner.stages.specs import RLSpec, optimizer_config


def _stage_tx(run: Run, stage: str) -> Any:
    return make_optimizer(optimizer_config(run.cfg, stage))


def checkpointer(run: Run, stage: str) -> Checkpointer:
    return Checkpointer(run.workdir / "ckpt" / stage, max_to_keep=int(run.cfg.keep_checkpoints),
                        async_save=False)


def fresh_state(run: Run, stage: str, params: Any) -> TrainState:
    """A new state of `stage`'s optimizer around `params`, which it takes over (a step donates them)."""
    model = nnx.merge(run.policy.graphdef, params)
    return create_train_state(model, _stage_tx(run, stage), seed=int(run.cfg.seed), mesh=run.policy.mesh)


def template(run: Run, stage: str) -> TrainState:
    """What a checkpoint of `stage` restores into: shapes and shardings only, no device memory."""
    return abstract_train_state(run.policy.graphdef, run.policy.abstract_params, _stage_tx(run, stage),
                                mesh=run.policy.mesh)


def final_params(run: Run, stage: str) -> Any:
    """The params a finished stage ended with."""
    with checkpointer(run, stage) as ck:
        return ck.restore(template(run, stage)).params


def _start_params(run: Run, stage: str, stages: Sequence[str]) -> Any:
    """A stage starts from the previous stage's final params, else from `init_from`, else from the
    policy's initial weights (handed over: the policy keeps only their shapes afterwards)."""
    i = list(stages).index(stage)
    if i > 0:
        return final_params(run, stages[i - 1])
    if run.cfg.init_from:
        return load_stage_params(run, Path(run.cfg.init_from))
    return run.policy.take_params()


def load_stage_params(run: Run, path: Path, step: int | None = None) -> Any:
    """Params from a stage checkpoint directory (written by any stage's optimizer)."""
    if not path.is_dir():
        raise TrainConfigError(f"checkpoint directory {path} does not exist")
    errors = []
    with Checkpointer(path, async_save=False) as ck:
        if ck.latest_step() is None:
            raise TrainConfigError(f"no checkpoint in {path}")
        for stage in STAGE_ORDER:  # the optimizer state's structure depends on the stage's optimizer
            try:
                return ck.restore(template(run, stage), step).params
            except Exception as err:  # noqa: BLE001 - try the next optimizer layout
                errors.append(f"{stage}: {str(err).splitlines()[0][:200]}")
    raise TrainConfigError(f"cannot restore params from {path} with this model config: " + "; ".join(errors))


def _keeps_reference(run: Run, stage: str) -> bool:
    """RL with a KL term keeps a frozen copy of its starting params."""
    spec = run.specs.get(stage)
    return isinstance(spec, RLSpec) and float(spec.grpo.kl_coef) > 0


def stage_state(run: Run, stage: str, stages: Sequence[str]) -> tuple[TrainState, Any, int]:
    """(state to continue from, RL's frozen reference policy or None, step restored or 0).

    Nothing is kept that the stage does not use: a resumed stage restores into an abstract
    template; the starting params are read only to build a fresh state, and for RL's KL term,
    whose reference is a copy in `rl.reference_dtype` (fresh buffers: the state's are donated)."""
    with checkpointer(run, stage) as ck:
        latest = ck.latest_step()
        state = ck.restore(template(run, stage)) if latest is not None else None
    reference = None
    keep_reference = _keeps_reference(run, stage)
    if state is None or keep_reference:
        start = _start_params(run, stage, stages)
        if keep_reference:
            reference = reference_copy(start, reference_dtype(run.cfg, run.policy.model_config))
        if state is None:
            state = fresh_state(run, stage, start)
        del start
    return state, reference, int(latest or 0)


def stage_done(run: Run, stage: str) -> bool:
    with checkpointer(run, stage) as ck:
        return (ck.latest_step() or 0) >= run.specs[stage].steps > 0


def save_checkpoint(ck: Checkpointer, state: TrainState, every: int, total: int) -> None:
    step = int(jax.device_get(state.step))
    if step % max(1, every) == 0 or step >= total:
        ck.save(state, force=True)


def advance(state: TrainState, k: int) -> TrainState:
    """`state` with its step count `k` further (jitted: across processes the step is a global array)."""
    sharding = getattr(state.step, "sharding", None)
    return state.replace(step=jax.jit(lambda s: s + k, out_shardings=sharding)(state.step))


def progress(run: Run, total: int, initial: int, desc: str) -> tqdm:
    return tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True,
                disable=not run.cfg.progress or not controller.is_controller())
