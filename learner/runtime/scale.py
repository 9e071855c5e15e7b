"""How the trainer steps at scale: batches placed on the mesh, micro-batches sized by tokens,
and the memory plan checked at start (RL's frozen reference policy: `learner.rl.reference`).

The stage loops in `learner.stages` call these instead of the bare jitted functions, so the same
loop runs on one device, on N devices of a host, and on several hosts. They take the *global* host
batch, the same on every process (`learner.runtime.controller`); across processes each places its
own share of the rows (`place_rows`), after padding the batch with rows that carry no loss to a
multiple of the mesh's batch shards.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from learner.lm.config import ModelConfig
from learner.lm.sharding import batch_size_multiple, host_local_rows, shard_batch
from learner.runtime import controller
from learner.runtime.device_memory import (
    HARDWARE_BYTES,
    MemoryPlan,
    PlanInputs,
    device_memory_bytes,
    plan_memory,
    rollout_rows_note,
)
from learner.runtime.microbatch import micro_batch_count
from learner.runtime.train_step import LossFn, TrainState, train_step

log = logging.getLogger(__name__)


def micro_batch_tokens(cfg: Any) -> int:
    """`train.micro_batch_tokens` of a run config (0: the whole batch in one pass)."""
    return int(cfg.train.micro_batch_tokens) if "train" in cfg else 0


def micro_batches_for(batch: dict[str, np.ndarray], mesh: Mesh | None, tokens: int) -> int:
    rows, seq = np.shape(batch["tokens"])
    return micro_batch_count(rows, seq, tokens, batch_size_multiple(mesh) if mesh is not None else 1)


def padded_rows(batch: dict[str, np.ndarray], mesh: Mesh | None) -> dict[str, np.ndarray]:
    """Across processes, the batch with all-zero rows appended up to a multiple of the mesh's batch
    shards (a zero `loss_mask` row adds nothing to a loss's sum or count); unchanged in one process,
    where such a batch is replicated instead."""
    if not controller.multi_process() or mesh is None:
        return batch
    rows = int(np.shape(batch["tokens"])[0])
    extra = -rows % batch_size_multiple(mesh)
    if not extra:
        return batch
    return {k: np.concatenate([np.asarray(v), np.zeros((extra, *np.shape(v)[1:]), np.asarray(v).dtype)])
            for k, v in batch.items()}


def place_rows(batch: dict[str, np.ndarray], mesh: Mesh | None) -> dict[str, jax.Array]:
    """A global host batch (`padded_rows`) on the mesh: each process places its own rows."""
    return shard_batch(controller.local_rows(padded_rows(batch, mesh)), mesh)


def host_rows(x: jax.Array, mesh: Mesh | None, rows: int) -> np.ndarray:
    """The first `rows` rows of a row-sharded result of `place_rows`'s batch, on every process."""
    return controller.gather_rows(host_local_rows(x, mesh))[:rows]


def step(state: TrainState, batch: dict[str, np.ndarray], loss_fn: LossFn,
         tokens_per_micro_batch: int = 0) -> tuple[TrainState, dict[str, jax.Array]]:
    """Place the host batch on the state's mesh and take one (micro-batched) optimizer step."""
    batch = padded_rows(batch, state.mesh)
    n = micro_batches_for(batch, state.mesh, tokens_per_micro_batch)
    return train_step(state, place_rows(batch, state.mesh), loss_fn, n)


def run_memory_plan(cfg: Any, model_cfg: ModelConfig, mesh: Mesh) -> MemoryPlan:
    """Print the run's per-device memory plan; refuse it (MemoryPlanError) when it cannot fit.

    Device memory: `train.device_memory_gb`, else a named `train.hardware`, else what the
    runtime reports; on CPU (nothing reported) the plan is printed and not enforced.
    """
    t = cfg.train
    gb = float(t.device_memory_gb or 0.0)
    hw = str(t.hardware or "")
    device_bytes = gb * 1e9 if gb else HARDWARE_BYTES.get(hw) or device_memory_bytes()
    inputs = PlanInputs.from_config(cfg, mesh.size)
    plan = plan_memory(model_cfg.replace(param_dtype=str(cfg.model.param_dtype),
                                         compute_dtype=str(cfg.model.compute_dtype)),
                       inputs, device_bytes or float("inf"), float(t.memory_headroom))
    log.info("%s", plan.format())
    note = rollout_rows_note(inputs)
    if note and "rl" in str(cfg.stages):
        log.info("%s", note)
    if device_bytes:
        plan.check()
    return plan
