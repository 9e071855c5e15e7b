"""The LM-head log-prob's custom VJP equals plain autodiff of log_softmax(logits)[target]."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from learner.bench.throughput import tiny_config
from learner.lm.model import Transformer
from learner.runtime.losses import head_logprobs, lm_loss_sum_count, logprobs_from_hidden


def _plain_logprobs(model: Transformer, hidden: jax.Array, targets: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(model.logits(hidden).astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


def _model(tied: bool, compute: str) -> Transformer:
    cfg = tiny_config(tie_word_embeddings=tied, compute_dtype=compute, param_dtype="float32")
    return Transformer(cfg, rngs=nnx.Rngs(3))


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("chunk", [None, 8, 5])
def test_values_and_gradients_match_autodiff_in_float32(tied: bool, chunk: int | None) -> None:
    model = _model(tied, "float32")
    rng = np.random.default_rng(0)
    hidden = jnp.asarray(rng.normal(size=(2, 13, 64)), jnp.float32)
    targets = jnp.asarray(rng.integers(0, 512, (2, 13)), jnp.int32)
    weights = jnp.asarray(rng.normal(size=(2, 13)), jnp.float32)  # a GRPO-like per-token cotangent
    graphdef, params = nnx.split(model)

    def ours(params: nnx.State, hidden: jax.Array) -> jax.Array:
        return jnp.sum(weights * logprobs_from_hidden(nnx.merge(graphdef, params), hidden, targets, chunk))

    def plain(params: nnx.State, hidden: jax.Array) -> jax.Array:
        return jnp.sum(weights * _plain_logprobs(nnx.merge(graphdef, params), hidden, targets))

    v1, (gp1, gh1) = jax.value_and_grad(ours, argnums=(0, 1))(params, hidden)
    v2, (gp2, gh2) = jax.value_and_grad(plain, argnums=(0, 1))(params, hidden)
    np.testing.assert_allclose(v1, v2, rtol=1e-5)
    np.testing.assert_allclose(gh1, gh2, rtol=1e-4, atol=1e-6)
    flat1, flat2 = jax.tree.leaves(gp1), jax.tree.leaves(gp2)
    assert len(flat1) == len(flat2)
    head_grads = 0
    for a, b in zip(flat1, flat2, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
        head_grads += int(np.abs(np.asarray(b)).max() > 0)
    assert head_grads >= 1  # the head weight really receives a gradient


def test_bfloat16_compute_gradients_are_close_and_backward_matmuls_are_bf16() -> None:
    model = _model(True, "bfloat16")
    rng = np.random.default_rng(1)
    hidden = jnp.asarray(rng.normal(size=(2, 16, 64)), jnp.bfloat16)
    targets = jnp.asarray(rng.integers(0, 512, (2, 16)), jnp.int32)
    w, layout = model.head_weight()

    def ours(w: jax.Array) -> jax.Array:
        return head_logprobs(hidden, w, targets, layout, "bfloat16").sum()

    def plain(w: jax.Array) -> jax.Array:
        logits = jnp.einsum("...d,vd->...v", hidden.astype(jnp.float32), w)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return jnp.take_along_axis(logp, targets[..., None], axis=-1).sum()

    g1, g2 = jax.grad(ours)(w), jax.grad(plain)(w)
    assert g1.dtype == jnp.float32  # the parameter's own dtype
    rel = float(jnp.linalg.norm(g1 - g2) / jnp.linalg.norm(g2))
    assert rel < 2e-2, rel
    # Every dot in the backward pass takes bf16 operands (no float32 GEMM over the vocabulary).
    def both(w: jax.Array, h: jax.Array) -> jax.Array:
        return head_logprobs(h, w, targets, layout, "bfloat16").sum()

    hlo = jax.jit(jax.grad(both, argnums=(0, 1))).lower(w, hidden).as_text()
    dots = [ln for ln in hlo.splitlines() if "stablehlo.dot_general" in ln]
    assert len(dots) == 4, dots  # forward, recomputed forward, d hidden, d weight
    for ln in dots:
        operand_types = ln.split(":")[-1].split("->")[0]
        assert "f32>" not in operand_types, ln


def test_lm_loss_is_unchanged_by_chunking() -> None:
    model = _model(False, "float32")
    rng = np.random.default_rng(2)
    tokens = jnp.asarray(rng.integers(0, 512, (2, 12)), jnp.int32)
    batch = {"tokens": tokens, "loss_mask": jnp.ones((2, 12), jnp.int32)}
    s1, c1 = lm_loss_sum_count(model, batch, chunk_size=None)
    s2, c2 = lm_loss_sum_count(model, batch, chunk_size=4)
    np.testing.assert_allclose(s1, s2, rtol=1e-5)
    assert float(c1) == float(c2) == 2 * 11
