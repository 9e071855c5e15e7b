"""GRPO: group advantages, the clipped loss against a hand computation, its gradients, aux metrics
through `train_step`, and a two-armed bandit that a tiny model learns to solve."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_setup import TINY_CFG, tiny_batch

from learner.lm.model import Transformer
from learner.rl.grpo import (
    GRPOConfig,
    group_advantages,
    grpo_loss_sum_count,
    make_grpo_loss,
    policy_logprobs,
    reference_logprobs,
    sequence_logprobs,
)
from learner.runtime.losses import lm_loss_sum_count, token_logprobs
from learner.runtime.train_step import (
    OptimizerConfig,
    create_train_state,
    grads_and_loss,
    make_optimizer,
    train_step,
)

# --------------------------------------------------------------------------- config


def test_config_validation() -> None:
    assert GRPOConfig().eps_high == 0.2 and GRPOConfig(clip_eps_high=0.28).eps_high == 0.28
    bad = [
        {"clip_eps": 0.0}, {"clip_eps": 1.0}, {"clip_eps": float("nan")},
        {"clip_eps_high": -0.1}, {"clip_eps_high": float("inf")},
        {"kl_coef": -1.0}, {"kl_coef": float("nan")},
        {"kl_estimator": "k4"}, {"aggregation": "batch"},
        {"adv_std_floor": -0.1}, {"adv_std_floor": float("inf")},
    ]  # fmt: skip
    for kw in bad:
        with pytest.raises(ValueError):
            GRPOConfig(**kw)


# --------------------------------------------------------------------------- advantages


def test_group_advantages_hand_example() -> None:
    rewards = np.array([1, 0, 0, 1, 2, 2, 2, 2], np.float64)
    groups = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    adv = group_advantages(rewards, groups, None, GRPOConfig())
    assert adv.dtype == np.float32
    # group 0: mean 0.5, std 0.5 -> +-1; group 1: no spread -> 0
    np.testing.assert_allclose(adv, [1, -1, -1, 1, 0, 0, 0, 0], atol=1e-7)


def test_group_advantages_interleaved_groups_and_no_scaling() -> None:
    rewards = np.array([3.0, 10.0, 1.0, 20.0, 2.0, 30.0])
    groups = np.array([7, 2, 7, 2, 7, 2])  # arbitrary ids, interleaved
    adv = group_advantages(rewards, groups, None, GRPOConfig(scale_by_std=False))
    np.testing.assert_allclose(adv, [1.0, -10.0, -1.0, 0.0, 0.0, 10.0], atol=1e-6)
    scaled = group_advantages(rewards, groups, None, GRPOConfig())
    std7, std2 = np.sqrt(2 / 3), np.sqrt(200 / 3)
    np.testing.assert_allclose(
        scaled, [1 / std7, -10 / std2, -1 / std7, 0, 0, 10 / std2], rtol=1e-6, atol=1e-7
    )


def test_group_advantages_std_floor() -> None:
    rewards = np.array([1.0, 1.02, 5.0, 7.0])
    groups = np.array([0, 0, 1, 1])
    adv = group_advantages(rewards, groups, None, GRPOConfig(adv_std_floor=0.1))
    # group 0: std 0.01 < floor 0.1 -> +-0.01/0.1; group 1: std 1 > floor -> +-1
    np.testing.assert_allclose(adv, [-0.1, 0.1, -1.0, 1.0], rtol=1e-5)
    unfloored = group_advantages(rewards, groups, None, GRPOConfig(adv_std_floor=0.0))
    np.testing.assert_allclose(unfloored, [-1.0, 1.0, -1.0, 1.0], rtol=1e-5)


def test_group_advantages_invalid_excluded_and_singletons() -> None:
    rewards = np.array([1.0, 0.0, 100.0, np.nan, 5.0, 4.0, 0.0])
    groups = np.array([0, 0, 0, 0, 1, 2, 2])
    valid = np.array([True, True, False, False, True, True, False])
    adv = group_advantages(rewards, groups, valid, GRPOConfig())
    # group 0: valid {1, 0} -> +-1, invalid samples (incl. a NaN reward) get 0;
    # group 1: single sample -> 0; group 2: one valid sample left -> 0
    np.testing.assert_array_equal(adv, np.array([1, -1, 0, 0, 0, 0, 0], np.float32))
    with pytest.raises(ValueError, match="finite"):
        group_advantages(rewards, groups, None, GRPOConfig())
    with pytest.raises(ValueError):
        group_advantages(rewards, groups[:3], None, GRPOConfig())


# --------------------------------------------------------------------------- loss vs numpy


def _model() -> Transformer:
    return Transformer(TINY_CFG, rngs=nnx.Rngs(0))


def _hand_batch(model: Transformer) -> tuple[dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(7)
    b, s = 4, 10
    tokens = rng.integers(0, TINY_CFG.vocab_size, size=(b, s)).astype(np.int32)
    mask = np.zeros((b, s), np.int32)
    mask[0, 4:] = 1
    mask[1, 3:8] = 1  # right padding after position 7
    mask[2, 5:] = 1
    # row 3: no completion tokens at all (must not count in "sequence" aggregation)
    logp = np.asarray(token_logprobs(model, jnp.asarray(tokens), None, None))
    # log-ratios inside and outside both clip ranges used below ([0.8, 1.2] and [0.8, 1.28])
    deltas = rng.choice([-0.6, -0.3, -0.05, 0.0, 0.05, 0.15, 0.3, 0.6], size=(b, s))
    old = (logp - deltas).astype(np.float32)
    ref = (logp + rng.normal(0.0, 0.3, size=(b, s))).astype(np.float32)
    adv = np.array([1.0, -0.8, 0.5, 2.0], np.float32)
    batch = {"tokens": tokens, "loss_mask": mask, "old_logprobs": old, "ref_logprobs": ref,
             "advantages": adv}  # fmt: skip
    return batch, logp


def _numpy_grpo(batch: dict[str, np.ndarray], logp32: np.ndarray, cfg: GRPOConfig) -> dict:
    """Case-by-case PPO objective (A>0: min(r, 1+eh)A; A<0: max(r, 1-el)A), in float64."""
    lp = logp32.astype(np.float64)
    old = batch["old_logprobs"].astype(np.float64)
    ref = batch["ref_logprobs"].astype(np.float64)
    mask = batch["loss_mask"].astype(bool).copy()
    mask[:, 0] = False
    rows = []
    for b in range(lp.shape[0]):
        a = float(batch["advantages"][b])
        toks = []
        for t in np.flatnonzero(mask[b]):
            r = np.exp(lp[b, t] - old[b, t])
            if a > 0:
                obj, clipped = min(r, 1 + cfg.eps_high) * a, r > 1 + cfg.eps_high
            elif a < 0:
                obj, clipped = max(r, 1 - cfg.eps_low) * a, r < 1 - cfg.eps_low
            else:
                obj, clipped = 0.0, False
            log_q = ref[b, t] - lp[b, t]  # log(pi_ref / pi)
            q = np.exp(log_q)
            kl = {"k1": np.log(1 / q), "k2": 0.5 * np.log(q) ** 2, "k3": q - np.log(q) - 1}[
                cfg.kl_estimator
            ]
            toks.append({"loss": -obj + cfg.kl_coef * kl, "pg": -obj, "kl": kl,
                         "clip": float(clipped), "ratio": r, "ent": -lp[b, t]})  # fmt: skip
        rows.append(toks)
    keys = ["loss", "pg", "kl", "clip", "ratio", "ent"]
    if cfg.aggregation == "token":
        flat = [tok for row in rows for tok in row]
        count = len(flat)
        sums = {k: sum(tok[k] for tok in flat) for k in keys}
    else:
        nonempty = [row for row in rows if row]
        count = len(nonempty)
        sums = {k: sum(sum(tok[k] for tok in row) / len(row) for row in nonempty) for k in keys}
    ratio_max = max(tok["ratio"] for row in rows for tok in row)
    return {"loss_sum": sums["loss"], "count": count, "pg_loss": sums["pg"] / count,
            "kl": sums["kl"] / count, "clip_frac": sums["clip"] / count,
            "ratio_mean": sums["ratio"] / count, "ratio_max": ratio_max,
            "entropy_proxy": sums["ent"] / count}  # fmt: skip


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
@pytest.mark.parametrize("eps_high", [None, 0.28])
def test_loss_matches_hand_computation(aggregation: str, estimator: str, eps_high) -> None:
    model = _model()
    batch, logp = _hand_batch(model)
    cfg = GRPOConfig(clip_eps=0.2, clip_eps_high=eps_high, kl_coef=0.1, kl_estimator=estimator,
                     aggregation=aggregation)  # fmt: skip
    want = _numpy_grpo(batch, logp, cfg)
    assert 0.1 < want["clip_frac"] < 0.9  # the example exercises both branches
    jb = jax.tree.map(jnp.asarray, batch)
    for chunk in (None, 4):  # unchunked and chunked (with padding) log-prob paths
        loss_sum, count, aux = grpo_loss_sum_count(model, jb, cfg, chunk)
        assert float(count) == want["count"]
        np.testing.assert_allclose(float(loss_sum), want["loss_sum"], rtol=2e-5, atol=1e-5)
        for k in ("pg_loss", "kl", "clip_frac", "ratio_mean", "ratio_max", "entropy_proxy"):
            assert aux[k].shape == () and aux[k].dtype == jnp.float32, k
            np.testing.assert_allclose(float(aux[k]), want[k], rtol=2e-5, atol=1e-6, err_msg=k)


def test_kl_off_ignores_reference_and_zero_advantage_is_pure_kl() -> None:
    model = _model()
    batch, _ = _hand_batch(model)
    jb = jax.tree.map(jnp.asarray, batch)
    no_ref = {k: v for k, v in jb.items() if k != "ref_logprobs"}
    ls0, c0, aux0 = grpo_loss_sum_count(model, no_ref, GRPOConfig(kl_coef=0.0), None)
    ls1, c1, aux1 = grpo_loss_sum_count(model, jb, GRPOConfig(kl_coef=0.0), None)
    assert float(ls0) == float(ls1) and float(aux0["kl"]) == 0.0
    assert float(ls0) == pytest.approx(float(aux0["pg_loss"]) * float(c0), rel=1e-6)
    # all advantages zero: the loss is beta * mean k3, and k3 >= 0
    zero_adv = {**jb, "advantages": jnp.zeros(4, jnp.float32)}
    ls, c, aux = grpo_loss_sum_count(model, zero_adv, GRPOConfig(kl_coef=0.5), None)
    assert float(aux["pg_loss"]) == 0.0 and float(aux["clip_frac"]) == 0.0
    assert float(aux["kl"]) > 0.0
    assert float(ls) / float(c) == pytest.approx(0.5 * float(aux["kl"]), rel=1e-6)


# --------------------------------------------------------------------------- gradients


@functools.partial(jax.jit, static_argnums=(0, 1))
def _jit_grad(fn: Callable, graphdef: Any, params: Any, batch: dict) -> Any:
    return jax.grad(lambda p: fn(nnx.merge(graphdef, p), batch))(params)


def _grad(model: Transformer, fn: Callable, batch: dict) -> dict[str, np.ndarray]:
    """Gradient of scalar fn(model, batch) wrt the params, flattened by path."""
    graphdef, params = nnx.split(model)
    g = _jit_grad(fn, graphdef, params, jax.tree.map(jnp.asarray, batch))
    return {
        jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(g)
    }


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_on_policy_gradient_is_reinforce(aggregation: str) -> None:
    model = _model()
    batch, logp = _hand_batch(model)
    batch = {**batch, "old_logprobs": logp.astype(np.float32)}  # ratio == 1 everywhere
    del batch["ref_logprobs"]
    cfg = GRPOConfig(kl_coef=0.0, aggregation=aggregation)
    mask = jnp.asarray(batch["loss_mask"], jnp.float32).at[:, 0].set(0.0)
    adv = jnp.asarray(batch["advantages"])[:, None]

    def grpo(m: Transformer, jb: dict) -> jax.Array:
        ls, c, _ = grpo_loss_sum_count(m, jb, cfg, 4)
        return ls / c

    def reinforce(m: Transformer, jb: dict) -> jax.Array:
        lp = token_logprobs(m, jb["tokens"], None, None)
        if aggregation == "token":
            return -(adv * lp * mask).sum() / mask.sum()
        n = mask.sum(-1)
        per_row = -(adv * lp * mask).sum(-1) / jnp.maximum(n, 1.0)
        return per_row.sum() / (n > 0).sum()

    got, want = _grad(model, grpo, batch), _grad(model, reinforce, batch)
    assert got.keys() == want.keys()
    total = sum(float(np.abs(v).sum()) for v in want.values())
    assert total > 1e-3  # the comparison is not between two zero trees
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-7, err_msg=k)


def test_clipped_branch_has_no_gradient() -> None:
    model = _model()
    batch, logp = _hand_batch(model)
    old = logp.astype(np.float32).copy()
    old[0, 5] = logp[0, 5] - 0.5  # ratio e^0.5 ~ 1.65 > 1 + eps, A[0] = +1 -> clipped
    batch = {**batch, "old_logprobs": old}
    cfg = GRPOConfig(kl_coef=0.0)

    def loss_sum(m: Transformer, jb: dict) -> jax.Array:
        return grpo_loss_sum_count(m, jb, cfg, None)[0]

    def grad(mask_row0: list[int], a0: float = 1.0) -> dict[str, np.ndarray]:
        mask = np.zeros_like(batch["loss_mask"])
        mask[0, mask_row0] = 1
        adv = batch["advantages"].copy()
        adv[0] = a0
        return _grad(model, loss_sum, {**batch, "loss_mask": mask, "advantages": adv})

    only_clipped = grad([5])
    assert all(np.all(v == 0.0) for v in only_clipped.values())
    full, without = grad([4, 5, 6, 7]), grad([4, 6, 7])
    assert sum(float(np.abs(v).sum()) for v in full.values()) > 1e-3
    for k in full:
        np.testing.assert_allclose(full[k], without[k], rtol=1e-5, atol=1e-8, err_msg=k)
    # with A < 0 the same high ratio takes the unclipped branch and does get a gradient
    negative = grad([5], a0=-1.0)
    assert sum(float(np.abs(v).sum()) for v in negative.values()) > 1e-3


# --------------------------------------------------------------------------- train_step aux


def _state(lr: float = 3e-3):
    tx = make_optimizer(OptimizerConfig(learning_rate=lr, grad_clip_norm=1.0))
    return create_train_state(_model(), tx, seed=0)


def _lm_with_aux(model: Transformer, batch: dict):
    loss_sum, count = lm_loss_sum_count(model, batch, None)
    return (
        loss_sum,
        count,
        {"mean_nll": loss_sum / count, "n_rows": jnp.float32(batch["tokens"].shape[0])},
    )


def _lm_bad_aux(model: Transformer, batch: dict):
    loss_sum, count = lm_loss_sum_count(model, batch, None)
    return loss_sum, count, {"loss": loss_sum}


def _lm_vector_aux(model: Transformer, batch: dict):
    loss_sum, count = lm_loss_sum_count(model, batch, None)
    return loss_sum, count, {"per_row": jnp.zeros(batch["tokens"].shape[0])}


def test_train_step_aux_metrics_and_two_tuple_compat() -> None:
    batch = jax.tree.map(jnp.asarray, tiny_batch(0))
    # extra batch entries (e.g. reference log-probs) are carried along and ignored by this loss
    batch_extra = {**batch, "ref_logprobs": jnp.zeros(batch["tokens"].shape, jnp.float32)}
    s2, m2 = train_step(_state(), batch, lm_loss_sum_count)
    s3, m3 = train_step(_state(), batch_extra, _lm_with_aux)
    assert set(m2) == {"loss", "count", "grad_norm"}
    assert set(m3) == {"loss", "count", "grad_norm", "mean_nll", "n_rows"}
    assert float(m3["mean_nll"]) == pytest.approx(float(m3["loss"]), rel=1e-6)
    assert float(m3["n_rows"]) == 8.0
    assert float(m2["loss"]) == pytest.approx(float(m3["loss"]), rel=1e-6)
    assert float(m2["grad_norm"]) == pytest.approx(float(m3["grad_norm"]), rel=1e-6)
    assert int(s2.step) == int(s3.step) == 1
    loss_a, _ = jax.jit(grads_and_loss, static_argnums=2)(_state(), batch, _lm_with_aux)
    assert float(loss_a) == pytest.approx(float(m2["loss"]), rel=1e-6)
    with pytest.raises(ValueError, match="clash"):
        train_step(_state(), batch, _lm_bad_aux)
    with pytest.raises(ValueError, match="scalar"):
        train_step(_state(), batch, _lm_vector_aux)


def test_grpo_loss_is_a_stable_static_argument() -> None:
    a, b = make_grpo_loss(GRPOConfig()), make_grpo_loss(GRPOConfig(), 512)
    assert a == b and hash(a) == hash(b) and a is not b
    assert make_grpo_loss(GRPOConfig(kl_coef=0.0)) != a
    assert make_grpo_loss(GRPOConfig(), chunk_size=64) != a


# --------------------------------------------------------------------------- bandit


def test_bandit_learns_rewarded_completion() -> None:
    prompt, comp_a, comp_b = [3, 17, 29, 44], [60, 61, 62], [90, 91, 92]
    tokens = jnp.asarray([prompt + comp_a] * 2 + [prompt + comp_b] * 2, jnp.int32)
    mask = jnp.asarray([[0] * len(prompt) + [1] * len(comp_a)] * 4, jnp.int32)
    rewards = np.array([1.0, 1.0, 0.0, 0.0])
    adv = group_advantages(rewards, np.zeros(4, np.int64), None, GRPOConfig())
    np.testing.assert_allclose(adv, [1, 1, -1, -1], atol=1e-7)

    state = _state(lr=3e-3)
    ref = reference_logprobs(state.graphdef, state.params, tokens, mask, None)
    ab = np.asarray(sequence_logprobs(state.model, tokens[1::2], mask[1::2], None))
    np.testing.assert_allclose(ab, np.asarray(ref).sum(-1)[1::2], rtol=1e-5)
    gap0, lp_a0 = float(ab[0] - ab[1]), float(ab[0])

    cfg = GRPOConfig(kl_coef=0.04)
    cache_before = train_step._cache_size()
    for _ in range(25):
        old = policy_logprobs(state, tokens, mask, None)
        batch = {"tokens": tokens, "loss_mask": mask, "old_logprobs": old,
                 "ref_logprobs": ref, "advantages": jnp.asarray(adv)}  # fmt: skip
        # a fresh (but equal) loss object each step must not trigger a recompile
        state, metrics = train_step(state, batch, make_grpo_loss(dataclasses.replace(cfg), None))
        assert float(metrics["ratio_mean"]) == pytest.approx(1.0, abs=1e-5)
        assert float(metrics["clip_frac"]) == 0.0
        assert np.isfinite(float(metrics["loss"])) and float(metrics["kl"]) >= 0.0
    assert train_step._cache_size() - cache_before <= 1
    assert float(metrics["kl"]) > 0.0  # the policy has moved away from the reference

    ab = np.asarray(sequence_logprobs(state.model, tokens[1::2], mask[1::2], None))
    gap1, lp_a1 = float(ab[0] - ab[1]), float(ab[0])
    assert gap1 - gap0 > 5.0, (gap0, gap1)
    assert lp_a1 - lp_a0 > 5.0 and np.exp(lp_a1) > 0.25, (lp_a0, lp_a1)
