"""Token log-probabilities in sequence chunks and the masked next-token cross-entropy.

Only a [B, chunk, V] block of logits exists at a time (each chunk is rematerialised in the
backward pass), so long sequences with ~150k vocabularies fit in memory.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from learner.lm.model import Transformer


def logprobs_from_hidden(
    model: Transformer, hidden: jax.Array, targets: jax.Array, chunk_size: int | None
) -> jax.Array:
    """log p(targets[b, t] | hidden[b, t]) at temperature 1, float32 [B, S].

    The LM head runs through `head_logprobs` (a custom VJP): no [.., V] logits are kept for
    the backward pass, and the backward matmuls run in the compute dtype.
    """
    b, s, d = hidden.shape
    w, layout = model.head_weight()
    cdt = jnp.dtype(model.cfg.jnp_compute_dtype).name
    if chunk_size is None or chunk_size >= s:
        return head_logprobs(hidden, w, targets, layout, cdt)
    n = -(-s // chunk_size)
    pad = n * chunk_size - s
    h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk_size, d)
    t = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, n, chunk_size)

    def body(carry: None, xs: tuple[jax.Array, jax.Array]) -> tuple[None, jax.Array]:
        return carry, head_logprobs(xs[0], w, xs[1], layout, cdt)

    _, out = jax.lax.scan(body, None, (h.swapaxes(0, 1), t.swapaxes(0, 1)))
    return out.swapaxes(0, 1).reshape(b, n * chunk_size)[:, :s]


def _head_logits(hidden: jax.Array, w: jax.Array, layout: str, cdt: str) -> jax.Array:
    eq = "...d,vd->...v" if layout == "vd" else "...d,dv->...v"
    return jnp.einsum(eq, hidden.astype(cdt), w.astype(cdt), preferred_element_type=jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def head_logprobs(
    hidden: jax.Array, w: jax.Array, targets: jax.Array, layout: str, cdt: str
) -> jax.Array:
    """log softmax(hidden @ W)[targets], float32 [...].

    hidden [..., d]; w is the head parameter as stored ([V, d] for layout "vd", [d, V] for "dv");
    the matmul runs in `cdt` with float32 accumulation, the softmax in float32.

    Backward: the logits are recomputed (only hidden and the log-normaliser are saved), and
    d logp / d logits = onehot - softmax, scaled by the incoming cotangent, is cast to the
    compute dtype before the two backward matmuls. Without this, the float32 cotangent of the
    float32 logits turns both backward matmuls into float32 (TF32) GEMMs: measured on an H200
    for a 151936-token vocabulary, they took 145 of a 573 ms training step.
    """
    return _head_logprobs_fwd(hidden, w, targets, layout, cdt)[0]


def _head_logprobs_fwd(
    hidden: jax.Array, w: jax.Array, targets: jax.Array, layout: str, cdt: str
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    logits = _head_logits(hidden, w, layout, cdt)
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return picked - lse, (hidden, w, targets, lse)


def _head_logprobs_bwd(
    layout: str, cdt: str, res: tuple[jax.Array, jax.Array, jax.Array, jax.Array], g: jax.Array
) -> tuple[jax.Array, jax.Array, None]:
    hidden, w, targets, lse = res
    logits = _head_logits(hidden, w, layout, cdt)
    onehot = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1) == targets[..., None]
    probs = jnp.exp(logits - lse[..., None])
    dlogits = (g[..., None] * (onehot.astype(jnp.float32) - probs)).astype(cdt)
    wc, hc = w.astype(cdt), hidden.astype(cdt)
    if layout == "vd":
        dh = jnp.einsum("...v,vd->...d", dlogits, wc, preferred_element_type=jnp.float32)
        dw = jnp.einsum("...v,...d->vd", dlogits, hc, preferred_element_type=jnp.float32)
    else:
        dh = jnp.einsum("...v,dv->...d", dlogits, wc, preferred_element_type=jnp.float32)
        dw = jnp.einsum("...v,...d->dv", dlogits, hc, preferred_element_type=jnp.float32)
    return dh.astype(hidden.dtype), dw.astype(w.dtype), None


head_logprobs.defvjp(_head_logprobs_fwd, _head_logprobs_bwd)


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
