"""Continuous batching (learner.lm.engine): the same completions as the static sampler for greedy
decoding whatever the refill order, the policy's own log-probs when sampling, per-prompt caps,
shared prefill of equal prompts, and fewer wasted row-steps than a static batch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from learner.lm.config import ModelConfig
from learner.lm.engine import ContinuousSampler, expected_static_efficiency, row_steps_static
from learner.lm.model import Transformer
from learner.lm.sampler import Sampler, SamplerError, SamplingConfig
from learner.runtime.losses import token_logprobs

CFG = ModelConfig(
    vocab_size=71, hidden_size=48, intermediate_size=96, num_layers=2, num_heads=4,
    num_kv_heads=2, head_dim=12, qkv_bias=True, qk_norm=True, compute_dtype="float32",
)  # fmt: skip

PROMPTS = [[5, 9, 13], [7, 1, 2, 3, 4, 60, 22], [40], [8, 8], [3, 1, 4, 1, 5], [11, 12, 13, 14], [2]]


@pytest.fixture(scope="module")
def model() -> Transformer:
    return Transformer(CFG, rngs=nnx.Rngs(3))


@pytest.mark.parametrize("rows,chunk", [(3, 4), (2, 1), (8, 64)])
def test_greedy_completions_equal_the_static_samplers(model: Transformer, rows: int, chunk: int) -> None:
    sc = SamplingConfig(max_new_tokens=12, temperature=0.0)
    want = Sampler(model).generate(PROMPTS, sc, jax.random.PRNGKey(0))
    eng = ContinuousSampler(model, rows=rows, chunk=chunk, refill_batch=1)
    got = eng.generate(PROMPTS, sc, jax.random.PRNGKey(0))
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_allclose(got.logprobs, want.logprobs, rtol=1e-4, atol=1e-5)
    assert got.finish_reasons == want.finish_reasons and got.lengths.tolist() == want.lengths.tolist()
    if rows < len(PROMPTS):
        assert eng.stats.refills > 1  # rows were reused
        assert eng.stats.steps <= 12 * -(-len(PROMPTS) // rows)  # no more steps than static batches


def test_eos_ends_a_row_and_the_row_takes_the_next_prompt(model: Transformer) -> None:
    greedy = SamplingConfig(max_new_tokens=12, temperature=0.0)
    first = Sampler(model).generate(PROMPTS, greedy, jax.random.PRNGKey(0))
    eos = int(first.tokens[1, 3])  # prompt 1 stops at its 4th token (or earlier if the id came before)
    sc = SamplingConfig(max_new_tokens=12, temperature=0.0, eos_ids=(eos,))
    want = Sampler(model).generate(PROMPTS, sc, jax.random.PRNGKey(0))
    got = ContinuousSampler(model, rows=2, chunk=3, refill_batch=1).generate(PROMPTS, sc, jax.random.PRNGKey(0))
    assert "eos" in want.finish_reasons
    np.testing.assert_array_equal(got.tokens, want.tokens)
    assert got.finish_reasons == want.finish_reasons and got.lengths.tolist() == want.lengths.tolist()


def test_sampled_logprobs_are_the_policys(model: Transformer) -> None:
    sc = SamplingConfig(max_new_tokens=10, temperature=1.0)
    res = ContinuousSampler(model, rows=3, chunk=2).generate(PROMPTS, sc, jax.random.PRNGKey(5))
    seqs = [list(p) + c for p, c in zip(PROMPTS, res.completions(), strict=True)]
    width = max(len(x) for x in seqs)
    toks = np.zeros((len(seqs), width), np.int32)
    for i, x in enumerate(seqs):
        toks[i, : len(x)] = x
    lp = np.asarray(token_logprobs(model, jnp.asarray(toks), None, chunk_size=8))
    for i, p in enumerate(PROMPTS):
        n = int(res.lengths[i])
        np.testing.assert_allclose(res.logprobs[i, :n], lp[i, len(p):len(p) + n], rtol=1e-4, atol=1e-4)


def test_limits_cap_each_prompt_and_waste_fewer_row_steps_than_a_static_batch(model: Transformer) -> None:
    prompts = [[1 + i % 5, 7] for i in range(12)]
    limits = [2, 16] * 6
    sc = SamplingConfig(max_new_tokens=16, temperature=1.0, eos_ids=(-1,))
    eng = ContinuousSampler(model, rows=4, chunk=4, refill_batch=1)
    res = eng.generate(prompts, sc, jax.random.PRNGKey(1), limits=limits)
    assert res.lengths.tolist() == limits
    assert res.finish_reasons == ["length"] * 12
    assert eng.stats.tokens == sum(limits)
    static = expected_static_efficiency(limits, 4)
    assert static == pytest.approx(sum(limits) / row_steps_static(limits, 4))
    assert eng.stats.row_efficiency > static + 0.2, (eng.stats, static)


def test_equal_prompts_refilled_together_share_one_prefill(model: Transformer) -> None:
    group = [[5, 9, 13]] * 4 + [[40, 41]] * 4
    eng = ContinuousSampler(model, rows=8)
    res = eng.generate(group, SamplingConfig(max_new_tokens=6, temperature=0.0), jax.random.PRNGKey(0))
    assert eng.stats.refills == 1 and eng.stats.prefilled == 2
    assert (res.tokens[:4] == res.tokens[0]).all() and (res.tokens[4:] == res.tokens[4]).all()


def test_bad_requests_are_refused(model: Transformer) -> None:
    eng = ContinuousSampler(model, rows=2)
    sc = SamplingConfig(max_new_tokens=4)
    with pytest.raises(SamplerError, match="at least one token"):
        eng.generate([[1], []], sc, jax.random.PRNGKey(0))
    with pytest.raises(SamplerError, match="limits"):
        eng.generate([[1], [2]], sc, jax.random.PRNGKey(0), limits=[1, 0])
    with pytest.raises(SamplerError, match="rows >= 1"):
        ContinuousSampler(model, rows=0)


def test_static_sampler_limits_cut_each_row_at_its_cap(model: Transformer) -> None:
    sc = SamplingConfig(max_new_tokens=10, temperature=0.0)
    full = Sampler(model).generate(PROMPTS, sc, jax.random.PRNGKey(0))
    caps = [1, 10, 4, 7, 2, 10, 3]
    cut = Sampler(model).generate(PROMPTS, sc, jax.random.PRNGKey(0), limits=caps)
    assert cut.lengths.tolist() == caps and cut.finish_reasons == ["length"] * len(PROMPTS)
    for i, c in enumerate(caps):
        assert cut.tokens[i, :c].tolist() == full.tokens[i, :c].tolist()
        assert (cut.tokens[i, c:] == 0).all() and (cut.logprobs[i, c:] == 0).all()


def test_the_learner_samples_with_the_configured_engine(tmp_path) -> None:
    from configs import demo
    from learner.config_check import TrainConfigError, validate_config
    from learner.rl.rollout import Prompt, generate_rollouts
    from learner.stages.run import open_run
    from learner.stages.samples import make_sampler

    cfg = demo.get_config()
    cfg.workdir = str(tmp_path / "run")
    cfg.model.vocab_size, cfg.model.hidden_size, cfg.model.intermediate_size, cfg.model.num_layers = 300, 32, 64, 1
    cfg.sampling.engine = "continuous"
    cfg.sampling.batch_size = 3
    cfg.sampling.max_new_tokens = 8
    run = open_run(cfg)
    try:
        sampler = make_sampler(run, run.policy.take_params())
        assert isinstance(sampler, ContinuousSampler) and sampler.rows == 3
        ids = run.encode_prompt("class ModelNew(nn.Module):")
        prompts = [Prompt(f"s{i}", "L1/1", i // 2, ids[: 4 + i]) for i in range(7)]
        rollouts, stats = generate_rollouts(sampler, run.tokenizer, prompts, run.sampling(), jax.random.PRNGKey(0),
                                            policy_version=3, batch_size=3)
        assert [r.sample_id for r in rollouts] == [p.sample_id for p in prompts]
        assert all(1 <= len(r.completion_ids) <= 8 and r.policy_version == 3 for r in rollouts)
        assert stats.new_tokens == sum(len(r.completion_ids) for r in rollouts)
    finally:
        run.close()
    cfg.sampling.engine = "paged"
    with pytest.raises(TrainConfigError, match="sampling.engine"):
        validate_config(cfg)


def test_rollout_benchmark_runs_both_samplers_on_the_same_samples() -> None:
    from learner.bench.rollout import bench_rollout, table

    r = bench_rollout("tiny")
    assert r["samples"] == 32 and r["tokens"] > 0
    assert r["continuous"]["row_efficiency"] > r["static"]["row_efficiency"]
    assert r["continuous"]["prefilled"] < r["samples"]  # equal prompts refilled together share one prefill
    assert "| continuous batching |" in table(r)


def test_steps_between_checks_divides_the_steps() -> None:
    from learner.lm.sampler import steps_between_checks

    assert steps_between_checks(2048, 8) == 8
    assert steps_between_checks(12, 8) == 6 and steps_between_checks(13, 8) == 1
    assert steps_between_checks(3, 8) == 3 and steps_between_checks(12, 1) == 1
    with pytest.raises(ValueError, match=">= 1"):
        steps_between_checks(12, 0)
    with pytest.raises(SamplerError, match=">= 1"):
        Sampler(Transformer(CFG, rngs=nnx.Rngs(0)), steps_per_check=0)


@pytest.mark.parametrize("k", [3, 8])
def test_checking_every_k_steps_gives_the_same_completions(model: Transformer, k: int) -> None:
    """Greedy with an EOS that ends some rows early, sampled with per-row caps, and continuous
    batching: the same tokens and log-probs whether the loop checks every step or every k."""
    first = Sampler(model).generate(PROMPTS, SamplingConfig(max_new_tokens=12, temperature=0.0), jax.random.PRNGKey(0))
    eos = int(first.tokens[1, 3])
    greedy = SamplingConfig(max_new_tokens=12, temperature=0.0, eos_ids=(eos,))
    sampled = SamplingConfig(max_new_tokens=12, temperature=1.0)
    caps = [1, 12, 4, 7, 2, 12, 3]
    for sc, limits in ((greedy, None), (sampled, caps)):
        want = Sampler(model).generate(PROMPTS, sc, jax.random.PRNGKey(7), limits=limits)
        got = Sampler(model, steps_per_check=k).generate(PROMPTS, sc, jax.random.PRNGKey(7), limits=limits)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_allclose(got.logprobs, want.logprobs, rtol=1e-5, atol=1e-6)
        assert got.finish_reasons == want.finish_reasons and got.lengths.tolist() == want.lengths.tolist()
    want = ContinuousSampler(model, rows=2, chunk=4, refill_batch=1).generate(PROMPTS, greedy, jax.random.PRNGKey(0))
    eng = ContinuousSampler(model, rows=2, chunk=4, refill_batch=1, steps_per_check=k)
    got = eng.generate(PROMPTS, greedy, jax.random.PRNGKey(0))
    np.testing.assert_array_equal(got.tokens, want.tokens)
    assert got.finish_reasons == want.finish_reasons and got.lengths.tolist() == want.lengths.tolist()
    assert eng.stats.refills > 1
