"""Sampler correctness: greedy == repeated full forward argmax; log-probs == training log-probs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from learner.lm.config import ModelConfig
from learner.lm.model import Transformer
from learner.lm.sampler import Sampler, SamplingConfig, _generate, bucket_length
from learner.runtime.losses import token_logprobs

CFG = ModelConfig(
    vocab_size=71, hidden_size=48, intermediate_size=96, num_layers=2, num_heads=4,
    num_kv_heads=2, head_dim=12, qkv_bias=True, qk_norm=True, compute_dtype="float32",
)  # fmt: skip

PROMPTS = [[5, 9, 13], [7, 1, 2, 3, 4, 60, 22], [40]]


@pytest.fixture(scope="module")
def model() -> Transformer:
    return Transformer(CFG, rngs=nnx.Rngs(3))


def _training_logprobs(model: Transformer, prompts, completions) -> list[np.ndarray]:
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
    s = max(len(x) for x in seqs)
    toks = np.zeros((len(seqs), s), np.int32)
    for i, x in enumerate(seqs):
        toks[i, : len(x)] = x
    lp = np.asarray(token_logprobs(model, jnp.asarray(toks), None, chunk_size=8))
    return [lp[i, len(p) : len(p) + len(c)] for i, (p, c) in enumerate(zip(prompts, completions, strict=True))]


def test_greedy_matches_repeated_full_forward(model: Transformer) -> None:
    n_new = 12
    res = Sampler(model).generate(PROMPTS, SamplingConfig(max_new_tokens=n_new, temperature=0.0), jax.random.PRNGKey(0))
    fwd = jax.jit(lambda m, t: m(t))
    for row, prompt in enumerate(PROMPTS):
        seq = list(prompt)
        width = len(prompt) + n_new  # fixed shape: right padding cannot affect causal logits
        for _ in range(n_new):
            padded = np.zeros((1, width), np.int32)
            padded[0, : len(seq)] = seq
            logits = np.asarray(fwd(model, jnp.asarray(padded)))
            seq.append(int(logits[0, len(seq) - 1].argmax()))
        assert res.tokens[row].tolist() == seq[len(prompt) :]
    assert res.finish_reasons == ["length"] * 3 and res.lengths.tolist() == [n_new] * 3


@pytest.mark.parametrize("temperature,top_p", [(0.0, 1.0), (1.0, 1.0), (0.7, 0.9)])
def test_sampler_logprobs_equal_training_logprobs(model: Transformer, temperature, top_p) -> None:
    cfg = SamplingConfig(max_new_tokens=10, temperature=temperature, top_p=top_p)
    res = Sampler(model).generate(PROMPTS, cfg, jax.random.PRNGKey(7))
    completions = res.completions()
    ref = _training_logprobs(model, PROMPTS, completions)
    for row, c in enumerate(completions):
        np.testing.assert_allclose(res.logprobs[row, : len(c)], ref[row], atol=2e-5)
        assert np.all(res.logprobs[row, : len(c)] <= 0)


def test_sampling_is_random_but_reproducible(model: Transformer) -> None:
    s = Sampler(model)
    cfg = SamplingConfig(max_new_tokens=16, temperature=1.0)
    a = s.generate(PROMPTS, cfg, jax.random.PRNGKey(1)).tokens
    b = s.generate(PROMPTS, cfg, jax.random.PRNGKey(1)).tokens
    c = s.generate(PROMPTS, cfg, jax.random.PRNGKey(2)).tokens
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_top_p_tiny_is_greedy(model: Transformer) -> None:
    s = Sampler(model)
    greedy = s.generate(PROMPTS, SamplingConfig(max_new_tokens=8, temperature=0.0), jax.random.PRNGKey(0))
    nucleus = s.generate(PROMPTS, SamplingConfig(max_new_tokens=8, temperature=1.0, top_p=1e-6), jax.random.PRNGKey(5))
    assert np.array_equal(greedy.tokens, nucleus.tokens)


def test_eos_and_stop_sequences(model: Transformer) -> None:
    s = Sampler(model, pad_id=0)
    base = s.generate(PROMPTS, SamplingConfig(max_new_tokens=10, temperature=0.0), jax.random.PRNGKey(0))
    row0 = base.tokens[0].tolist()
    eos = row0[3]
    res = s.generate(PROMPTS, SamplingConfig(max_new_tokens=10, temperature=0.0, eos_ids=(eos,)), jax.random.PRNGKey(0))
    n = row0.index(eos) + 1
    assert res.finish_reasons[0] == "eos" and res.lengths[0] == n
    assert res.tokens[0, :n].tolist() == row0[:n] and np.all(res.tokens[0, n:] == 0)
    assert np.all(res.logprobs[0, n:] == 0)
    stop = tuple(base.tokens[1, 2:4].tolist())
    res2 = s.generate(PROMPTS, SamplingConfig(max_new_tokens=10, temperature=0.0, stop_sequences=(stop,)), jax.random.PRNGKey(0))
    row1 = base.tokens[1].tolist()
    end = next(e for e in range(2, 11) if tuple(row1[e - 2 : e]) == stop)
    assert res2.finish_reasons[1] == "stop" and res2.lengths[1] == end
    assert res2.tokens[1, :end].tolist() == row1[:end]


def test_buckets_limit_compilations(model: Transformer) -> None:
    assert bucket_length(3, None) == 16 and bucket_length(17, None) == 32
    assert bucket_length(100, [64, 128, 256]) == 128
    s = Sampler(model, prompt_buckets=[8, 32], cache_buckets=[32, 64])
    assert s.shapes_for(5, 20) == (8, 32)
    before = _generate._cache_size()
    cfg = SamplingConfig(max_new_tokens=6, temperature=0.0)
    for prompts in ([[1, 2]], [[1, 2, 3, 4, 5]], [[9] * 8]):
        s.generate(prompts, cfg, jax.random.PRNGKey(0))
    assert _generate._cache_size() - before == 1
