"""Token log-probabilities in sequence chunks and the masked next-token cross-entropy.

Only a [B, chunk, V] block of logits exists at a time (each chunk is rematerialised in the
backward pass), so long sequences with ~150k vocabularies fit in memory.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from learner.model import Transformer


def logprobs_from_hidden(
    model: Transformer, hidden: jax.Array, targets: jax.Array, chunk_size: int | None
) -> jax.Array:
    """log p(targets[b, t] | hidden[b, t]) at temperature 1, float32 [B, S]."""
    b, s, d = hidden.shape
    if chunk_size is None or chunk_size >= s:
        logits = model.logits(hidden)
        return _gather_logprob(logits, targets)
    n = -(-s // chunk_size)
    pad = n * chunk_size - s
    h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk_size, d)
    t = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, n, chunk_size)

    @jax.checkpoint
    def chunk(hc: jax.Array, tc: jax.Array) -> jax.Array:
        return _gather_logprob(model.logits(hc), tc)

    def body(carry: None, xs: tuple[jax.Array, jax.Array]) -> tuple[None, jax.Array]:
        return carry, chunk(*xs)

    _, out = jax.lax.scan(body, None, (h.swapaxes(0, 1), t.swapaxes(0, 1)))
    return out.swapaxes(0, 1).reshape(b, n * chunk_size)[:, :s]


def _gather_logprob(logits: jax.Array, targets: jax.Array) -> jax.Array:
    logits = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return picked - lse


def token_logprobs(
    model: Transformer,
    tokens: jax.Array,
    mask: jax.Array | None = None,
    chunk_size: int | None = 512,
) -> jax.Array:
    """Training log-probs: out[b, t] = log p_theta(tokens[b, t] | tokens[b, :t]) at temperature 1.

    Shape [B, S] float32; out[:, 0] = 0 (no context) and positions where `mask` is False are 0.
    Sequences are right-padded (positions 0..S-1).
    """
    hidden, _ = model.hidden_states(tokens)
    lp = logprobs_from_hidden(model, hidden[:, :-1], tokens[:, 1:], chunk_size)
    lp = jnp.pad(lp, ((0, 0), (1, 0)))
    if mask is not None:
        lp = jnp.where(mask.astype(bool), lp, 0.0)
    return lp


def lm_loss_sum_count(
    model: Transformer, batch: dict[str, Any], chunk_size: int | None = 512
) -> tuple[jax.Array, jax.Array]:
    """Masked next-token cross-entropy: (sum of -log p over target tokens, number of targets).

    batch["tokens"]: [B, S] int; batch["loss_mask"]: [B, S], 1 where tokens[b, t] is a target
    (predicted from tokens[b, :t]); position 0 is never a target.
    """
    tokens = batch["tokens"]
    mask = batch["loss_mask"].astype(jnp.float32).at[:, 0].set(0.0)
    lp = token_logprobs(model, tokens, None, chunk_size)
    return -(lp * mask).sum(), mask.sum()
