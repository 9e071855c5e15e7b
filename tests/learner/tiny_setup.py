"""Shared tiny model / data for subprocess workers and tests (no JAX device use at import)."""

from __future__ import annotations

import numpy as np

from learner.lm.config import ModelConfig

TINY_CFG = ModelConfig(
    vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
    num_kv_heads=2, head_dim=16, qkv_bias=True, compute_dtype="float32", param_dtype="float32",
)  # fmt: skip


def tiny_batch(step: int, batch: int = 8, seq: int = 32, vocab: int = 128) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1000 + step)
    tokens = rng.integers(0, vocab, size=(batch, seq)).astype(np.int32)
    mask = np.ones_like(tokens)
    mask[:, : seq // 4] = 0  # "prompt" part is not trained on
    mask[1, -5:] = 0  # some right padding
    return {"tokens": tokens, "loss_mask": mask}


def flat_params(state) -> dict[str, np.ndarray]:
    import jax

    from learner.lm.sharding import path_to_str

    return {
        path_to_str(p): np.asarray(jax.device_get(x))
        for p, x in jax.tree_util.tree_flatten_with_path(state)[0]
    }
