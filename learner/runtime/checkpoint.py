"""Orbax checkpoints of a `TrainState` (params, optimizer state, step, RNG key), keep-last-N.

Restores onto whatever mesh the *template* state lives on: every array is read with the target
sharding of the corresponding template leaf, so a checkpoint written on one mesh (or device count)
can be restored onto another.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from learner.runtime.train_step import TrainState

log = logging.getLogger(__name__)


class CheckpointNotFoundError(FileNotFoundError):
    """No (complete) checkpoint to restore."""


def _abstract(tree: Any) -> Any:
    def one(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))

    return jax.tree.map(one, tree)


class Checkpointer:
    """Thin wrapper over `ocp.CheckpointManager` for `TrainState`s."""

    def __init__(
        self,
        directory: str | Path,
        *,
        max_to_keep: int = 3,
        save_interval_steps: int = 1,
        async_save: bool = True,
    ):
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            save_interval_steps=save_interval_steps,
            create=True,
            enable_async_checkpointing=async_save,
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def save(self, state: TrainState, *, force: bool = False) -> bool:
        """Save at `state.step` (if the interval says so or `force`); returns whether it saved."""
        step = int(jax.device_get(state.step))
        saved = self.manager.save(
            step, args=ocp.args.StandardSave(state.checkpoint_items()), force=force
        )
        if saved:
            log.info("checkpoint step %d -> %s", step, self.directory)
        return bool(saved)

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    def restore(self, template: TrainState, step: int | None = None) -> TrainState:
        """Restore `step` (default: latest) with the shapes/dtypes/shardings of `template`."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise CheckpointNotFoundError(f"no checkpoint in {self.directory}")
        target = _abstract(template.checkpoint_items())
        items = self.manager.restore(step, args=ocp.args.StandardRestore(target))
        log.info("restored step %d from %s", step, self.directory)
        return template.with_items(items)

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
