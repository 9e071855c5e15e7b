"""RL's frozen reference policy (the KL term's pi_ref): a copy of the stage's starting weights in
`rl.reference_dtype`, and its log-probs over a host batch, micro-batched like the update on the
state's mesh (`learner.runtime.scale`)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from learner.lm.config import ModelConfig
from learner.rl.grpo import reference_logprobs
from learner.runtime.scale import host_rows, micro_batches_for, padded_rows, place_rows
from learner.runtime.train_step import TrainState


def reference_copy(params: Any, dtype: str) -> Any:
    """The frozen reference policy's weights with matrices stored in `dtype` (on device).

    With `dtype` = the model's compute dtype the reference computes exactly what the fp32 copy
    would (every matmul casts its weight to the compute dtype), in half the memory. Every leaf is
    a new buffer, so the params it was copied from may be donated to a training step.
    """

    def one(x: jax.Array) -> jax.Array:
        y = x.astype(dtype) if x.ndim >= 2 and jnp.issubdtype(x.dtype, jnp.floating) else x
        return jnp.copy(y)  # fresh buffers, never the input's (a training step donates those)

    return jax.jit(lambda p: jax.tree.map(one, p))(params)


def reference_dtype(cfg: Any, model_cfg: ModelConfig) -> str:
    name = str(cfg.rl.reference_dtype)
    return jnp.dtype(model_cfg.jnp_compute_dtype).name if name == "compute" else name


def batch_reference_logprobs(state: TrainState, ref_params: Any, batch: dict[str, np.ndarray],
                             tokens_per_micro_batch: int = 0) -> np.ndarray:
    """Reference log-probs of a host batch, micro-batched like the update, on the state's mesh."""
    rows = int(np.shape(batch["tokens"])[0])
    host = padded_rows({"tokens": batch["tokens"], "loss_mask": batch["loss_mask"]}, state.mesh)
    n = micro_batches_for(host, state.mesh, tokens_per_micro_batch)
    placed = place_rows(host, state.mesh)
    out = reference_logprobs(state.graphdef, ref_params, placed["tokens"], placed["loss_mask"],
                             micro_batches=n, mesh=state.mesh)
    if jax.process_count() == 1:
        return np.asarray(jax.device_get(out))[:rows]
    return host_rows(out, state.mesh, rows)
