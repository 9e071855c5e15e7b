"""Prefill attention in query blocks: the same result as the one-block path, in less memory."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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


def _tiny_model(compute: str = "float32") -> object:
    from flax import nnx

    from learner.lm.config import ModelConfig
    from learner.lm.model import Transformer

    cfg = ModelConfig(vocab_size=61, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=8, qkv_bias=True, compute_dtype=compute)
    return Transformer(cfg, rngs=nnx.Rngs(1))


def test_fused_prefill_rotation_gives_the_masked_paths_cache_and_logits() -> None:
    """Rotating rows to right padding, attending with row lengths and rotating the keys and values
    back (the path cuDNN runs fused) is the left-padded masked prefill: on the CPU the row lengths
    become a mask, so this checks the rotations and the last-token pick exactly."""
    from learner.lm.sampler import prefill_left_padded

    model = _tiny_model()
    p, lens = 12, np.array([3, 12, 7, 1], np.int32)
    rng = np.random.default_rng(0)
    prompt = np.zeros((4, p), np.int32)
    for r, n in enumerate(lens):
        prompt[r, p - n:] = rng.integers(1, 61, n)
    masked = jax.jit(lambda m, t, n: prefill_left_padded(m, t, n, 16, fused=False))(model, prompt, lens)
    fused = jax.jit(lambda m, t, n: prefill_left_padded(m, t, n, 16, fused=True))(model, prompt, lens)
    np.testing.assert_allclose(np.asarray(fused[0]), np.asarray(masked[0]), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(fused[2]), np.asarray(masked[2]))
    valid = np.asarray(masked[2])
    for (kf, vf), (km, vm) in zip(fused[1], masked[1], strict=True):
        for r in range(4):  # the prompt's slots hold the same keys and values
            cols = np.flatnonzero(valid[r])
            np.testing.assert_allclose(np.asarray(kf)[r][:, cols], np.asarray(km)[r][:, cols], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(np.asarray(vf)[r][:, cols], np.asarray(vm)[r][:, cols], rtol=1e-5, atol=1e-5)


def test_a_sampler_forced_to_the_fused_path_generates_the_same_tokens() -> None:
    from learner.lm.engine import ContinuousSampler
    from learner.lm.sampler import Sampler, SamplingConfig

    model = _tiny_model()
    prompts = [[5, 9, 13], [7, 1, 2, 3, 4, 60, 22], [40], [8, 8]]
    sc = SamplingConfig(max_new_tokens=8, temperature=0.0)
    masked = Sampler(model)
    assert masked.use_fused_prefill() is False  # XLA attention on the CPU: the masked path
    want = masked.generate(prompts, sc, jax.random.PRNGKey(0))
    for sampler in (Sampler(model), ContinuousSampler(model, rows=2, chunk=2, refill_batch=1)):
        sampler.fused_prefill = True
        got = sampler.generate(prompts, sc, jax.random.PRNGKey(0))
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_allclose(got.logprobs, want.logprobs, rtol=1e-4, atol=1e-5)


GPU_CHECK = """
import jax, numpy as np
from flax import nnx
from learner.lm.config import ModelConfig
from learner.lm.model import Transformer
from learner.lm.sampler import Sampler, prefill_left_padded
assert jax.default_backend() == "gpu", jax.default_backend()
cfg = ModelConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_layers=2, num_heads=8,
                  num_kv_heads=2, head_dim=32, qkv_bias=True, compute_dtype="bfloat16")
model = Transformer(cfg, rngs=nnx.Rngs(0))
assert model.attention_impl == "cudnn" and Sampler(model).use_fused_prefill()
p, lens = 1024, np.array([5, 1024, 700, 64], np.int32)
prompt = np.zeros((4, p), np.int32)
rng = np.random.default_rng(0)
for r, n in enumerate(lens):
    prompt[r, p - n:] = rng.integers(1, 512, n)
masked = jax.jit(lambda m, t, n: prefill_left_padded(m, t, n, p, fused=False))(model, prompt, lens)[0]
fused = jax.jit(lambda m, t, n: prefill_left_padded(m, t, n, p, fused=True))(model, prompt, lens)[0]
err = float(np.max(np.abs(np.asarray(fused) - np.asarray(masked))) / np.max(np.abs(np.asarray(masked))))
print("fused vs masked relative error", err)
assert err < 2e-2, err
print("OK")
"""


@pytest.mark.gpu
def test_cudnn_fused_prefill_matches_the_masked_path_on_a_gpu() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-c", GPU_CHECK], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout[-2000:] + proc.stderr[-4000:]
