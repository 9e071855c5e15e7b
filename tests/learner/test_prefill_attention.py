"""Prefill attention in query blocks: the same result as the one-block path, in less memory."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from learner.lm.attention import (
    PREFILL_QUERY_CHUNK,
    _chunked_causal_attention,
    _xla_causal_attention,
    causal_attention,
)


def _qkv(b: int, s: int, h: int, kh: int, d: int) -> tuple[jax.Array, ...]:
    ks = jax.random.split(jax.random.PRNGKey(0), 3)
    return (jax.random.normal(ks[0], (b, s, h, d)), jax.random.normal(ks[1], (b, s, kh, d)),
            jax.random.normal(ks[2], (b, s, kh, d)))


def test_blocks_equal_one_block_with_left_padding() -> None:
    q, k, v = _qkv(2, 37, 4, 2, 8)  # 37 = 4 full blocks of 8 and a partial one
    valid = jnp.arange(37)[None, :] >= jnp.array([[5], [0]])  # row 0 left-padded by 5
    one = _xla_causal_attention(q, k, v, scale=8**-0.5, key_valid=valid)
    blocks = _chunked_causal_attention(q, k, v, scale=8**-0.5, key_valid=valid, chunk=8)
    np.testing.assert_allclose(np.asarray(blocks)[:, 5:], np.asarray(one)[:, 5:], atol=1e-5)
    np.testing.assert_allclose(np.asarray(blocks)[1], np.asarray(one)[1], atol=1e-5)


def test_long_prefill_uses_blocks_and_less_memory() -> None:
    s = 4 * PREFILL_QUERY_CHUNK
    shapes = [jax.ShapeDtypeStruct(x.shape, jnp.bfloat16) for x in _qkv(1, s, 4, 2, 16)]
    valid = jax.ShapeDtypeStruct((1, s), jnp.bool_)

    def temp(fn: object) -> int:
        return jax.jit(fn).lower(*shapes, valid).compile().memory_analysis().temp_size_in_bytes

    chunked = temp(lambda q, k, v, m: causal_attention(q, k, v, impl="xla", key_valid=m))
    full = temp(lambda q, k, v, m: _xla_causal_attention(q, k, v, scale=0.25, key_valid=m))
    assert chunked < full / 2, (chunked, full)
