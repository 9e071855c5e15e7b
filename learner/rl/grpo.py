"""GRPO: group-relative advantages and the clipped policy-gradient loss with a KL penalty.

Advantages. For the samples i of one prompt (a "group" g) with scalar rewards r_i,

    A_i = (r_i - mean_g) / max(std_g, adv_std_floor)      (scale_by_std=True)
    A_i =  r_i - mean_g                                   (scale_by_std=False, Dr.GRPO style)

where mean_g and the population std_g (ddof=0) are taken over the group's *valid* samples only.
Invalid samples (e.g. infrastructure failures) get A_i = 0 and do not move the statistics; a group
with fewer than two valid samples has no baseline and all of its samples get A_i = 0. The floor
keeps continuous rewards with a tiny spread from turning noise into +-1 advantages.

Loss. With logp = log pi_theta(y_t | y_<t), old = log pi_old (the behaviour policy that sampled the
completion), ref = log pi_ref (a frozen reference), per completion token t of sequence b:

    ratio_t = exp(logp_t - old_t)
    pg_t    = -min(ratio_t * A_b, clip(ratio_t, 1 - eps, 1 + eps_high) * A_b)
    kl_t    = k1: logp - ref  |  k2: (logp - ref)^2 / 2  |  k3: exp(ref - logp) - (ref - logp) - 1
    loss_t  = pg_t + beta * kl_t

(k1, k2, k3 are Schulman's per-sample estimators of KL(pi_theta || pi_ref); k3 is unbiased and
non-negative.) When the min picks the clipped branch (A > 0 with ratio > 1 + eps_high, or A < 0
with ratio < 1 - eps) the token contributes no policy gradient. At ratio = 1 the policy gradient
is exactly -A_b * grad logp_t, i.e. REINFORCE with a group baseline.

Aggregation ("token"): loss_sum = sum_{b,t} loss_t, count = number of completion tokens, so the
step minimises the per-token mean over the whole batch. ("sequence"): each sequence's loss is its
per-token mean, loss_sum = sum over sequences with at least one completion token, count = number of
such sequences, so every sequence weighs the same regardless of its length.

The loss returns (loss_sum, count, aux) for `learner.runtime.train_step`; aux entries are means normalised
the same way as the loss (except "ratio_max", a max over completion tokens).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from learner.lm.model import Transformer
from learner.lm.sharding import activation_mesh
from learner.runtime.losses import token_logprobs
from learner.runtime.microbatch import merge_micro_batches, split_micro_batches
from learner.runtime.train_step import TrainState

KL_ESTIMATORS = ("k1", "k2", "k3")
AGGREGATIONS = ("token", "sequence")


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
    """Hyper-parameters of the GRPO objective (frozen and hashable, so usable as a jit static)."""

    clip_eps: float = 0.2  # ratio clipped to [1 - clip_eps, 1 + clip_eps_high]
    clip_eps_high: float | None = None  # None -> clip_eps
    kl_coef: float = 0.04  # beta; 0 disables the KL term and ref_logprobs are not read
    kl_estimator: str = "k3"  # "k1" | "k2" | "k3", per token
    aggregation: str = "token"  # "token" | "sequence"
    adv_std_floor: float = 0.1  # lower bound on the group std used to scale advantages
    scale_by_std: bool = True  # False: mean-centering only

    def __post_init__(self) -> None:
        if not (math.isfinite(self.clip_eps) and 0.0 < self.clip_eps < 1.0):
            raise ValueError(f"clip_eps must be in (0, 1), got {self.clip_eps}")
        if self.clip_eps_high is not None and not (
            math.isfinite(self.clip_eps_high) and self.clip_eps_high > 0.0
        ):
            raise ValueError(f"clip_eps_high must be a finite value > 0, got {self.clip_eps_high}")
        if not (math.isfinite(self.kl_coef) and self.kl_coef >= 0.0):
            raise ValueError(f"kl_coef must be a finite value >= 0, got {self.kl_coef}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"kl_estimator must be one of {KL_ESTIMATORS}, got {self.kl_estimator!r}"
            )
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if not (math.isfinite(self.adv_std_floor) and self.adv_std_floor >= 0.0):
            raise ValueError(f"adv_std_floor must be a finite value >= 0, got {self.adv_std_floor}")

    @property
    def eps_low(self) -> float:
        return self.clip_eps

    @property
    def eps_high(self) -> float:
        return self.clip_eps if self.clip_eps_high is None else self.clip_eps_high


# --------------------------------------------------------------------------- advantages


def group_advantages(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    valid: np.ndarray | None,
    cfg: GRPOConfig,
) -> np.ndarray:
    """Group-relative advantages, float32 [N] (see the module docstring for the formula).

    rewards: [N] float; group_ids: [N] int, equal for samples of the same prompt (any order, any
    values); valid: [N] bool or None (all valid). Rewards of invalid samples are never read, so
    they may be NaN; rewards of valid samples must be finite.
    """
    r = np.asarray(rewards, dtype=np.float64)
    g = np.asarray(group_ids)
    if r.ndim != 1:
        raise ValueError(f"rewards must be 1-D, got shape {r.shape}")
    if g.shape != r.shape:
        raise ValueError(f"group_ids shape {g.shape} != rewards shape {r.shape}")
    if not np.issubdtype(g.dtype, np.integer):
        raise ValueError(f"group_ids must be integers, got dtype {g.dtype}")
    v = np.ones(r.shape, bool) if valid is None else np.asarray(valid)
    if v.shape != r.shape:
        raise ValueError(f"valid shape {v.shape} != rewards shape {r.shape}")
    v = v.astype(bool)
    if not np.all(np.isfinite(r[v])):
        raise ValueError("rewards of valid samples must be finite (mark failures invalid)")

    adv = np.zeros(r.shape, np.float64)
    for gid in np.unique(g[v]):
        idx = np.flatnonzero((g == gid) & v)
        if idx.size < 2:
            continue
        rg = r[idx]
        centered = rg - rg.mean()
        if cfg.scale_by_std:
            denom = max(float(rg.std()), cfg.adv_std_floor)
            centered = centered / denom if denom > 0.0 else np.zeros_like(centered)
        adv[idx] = centered
    return adv.astype(np.float32)


# --------------------------------------------------------------------------- log-probs


def sequence_logprobs(
    model: Transformer, tokens: jax.Array, loss_mask: jax.Array, chunk_size: int | None = 512
) -> jax.Array:
    """log pi(completion | prompt) per row: sum of token log-probs over `loss_mask`, float32 [B]."""
    mask = _target_mask(loss_mask)
    return (token_logprobs(model, tokens, None, chunk_size) * mask).sum(axis=-1)


@functools.partial(
    jax.jit, static_argnames=("graphdef", "chunk_size", "micro_batches", "mesh")
)
def reference_logprobs(
    graphdef: Any,
    ref_params: Any,
    tokens: jax.Array,
    loss_mask: jax.Array | None = None,
    chunk_size: int | None = 512,
    micro_batches: int = 1,
    mesh: Any = None,
) -> jax.Array:
    """Token log-probs [B, S] float32 of the model (graphdef, params); forward only, no gradient.

    Aligned like `token_logprobs` (out[:, 0] = 0) and zero where `loss_mask` is 0 (when given).
    Used for a frozen reference policy and, through `policy_logprobs`, for old_logprobs.
    `micro_batches` > 1 runs the forward over that many row slices in turn (less activation
    memory, same result); `mesh` pins activations to it (`learner.lm.sharding.constrain`).
    """
    model = nnx.merge(graphdef, jax.lax.stop_gradient(ref_params))
    with activation_mesh(mesh):
        if micro_batches > 1:
            parts = split_micro_batches({"t": tokens}, micro_batches)["t"]
            lp = merge_micro_batches(
                jax.lax.map(lambda t: token_logprobs(model, t, None, chunk_size), parts))
        else:
            lp = token_logprobs(model, tokens, None, chunk_size)
    if loss_mask is not None:
        lp = jnp.where(_target_mask(loss_mask) > 0, lp, 0.0)
    return jax.lax.stop_gradient(lp)


def policy_logprobs(
    state: TrainState,
    tokens: jax.Array,
    loss_mask: jax.Array | None = None,
    chunk_size: int | None = 512,
) -> jax.Array:
    """`reference_logprobs` for the current params of `state` (e.g. to recompute old_logprobs)."""
    return reference_logprobs(state.graphdef, state.params, tokens, loss_mask, chunk_size)


# --------------------------------------------------------------------------- loss


def _target_mask(loss_mask: jax.Array) -> jax.Array:
    """float32 mask of target tokens; position 0 has no context and is never a target."""
    return jnp.asarray(loss_mask).astype(jnp.float32).at[:, 0].set(0.0)


def _kl(logp: jax.Array, ref: jax.Array, estimator: str) -> jax.Array:
    d = ref - logp  # log(pi_ref / pi)
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d * d
    return jnp.exp(d) - d - 1.0


def grpo_loss_sum_count(
    model: Transformer,
    batch: dict[str, Any],
    cfg: GRPOConfig,
    chunk_size: int | None = 512,
) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """Clipped GRPO loss: (loss_sum, count, aux); see the module docstring for the math.

    batch: "tokens" [B, S] int (prompt + completion, right-padded); "loss_mask" [B, S] (1 on
    completion tokens that are targets); "old_logprobs" [B, S] float32 (behaviour policy, aligned
    like `token_logprobs`); "ref_logprobs" [B, S] float32 (frozen reference; not read when
    kl_coef == 0); "advantages" [B] float32.
    aux: pg_loss, kl, clip_frac, ratio_mean, entropy_proxy (mean of -logp) normalised like the
    loss, and ratio_max over completion tokens.
    """
    tokens = batch["tokens"]
    b, s = tokens.shape
    mask = _target_mask(batch["loss_mask"])
    old = jnp.asarray(batch["old_logprobs"], jnp.float32)
    adv = jnp.asarray(batch["advantages"], jnp.float32)
    if mask.shape != (b, s) or old.shape != (b, s):
        raise ValueError(
            f"loss_mask {mask.shape} and old_logprobs {old.shape} must match tokens {(b, s)}"
        )
    if adv.shape != (b,):
        raise ValueError(f"advantages must have shape {(b,)}, got {adv.shape}")
    on = mask > 0

    logp = token_logprobs(model, tokens, None, chunk_size)
    # Masked positions are zeroed before exp so padding cannot produce inf/NaN (or their grads).
    log_ratio = jnp.where(on, logp - jax.lax.stop_gradient(old), 0.0)
    ratio = jnp.exp(log_ratio)
    a = adv[:, None]
    unclipped = ratio * a
    clipped = jnp.clip(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high) * a
    pg = -jnp.minimum(unclipped, clipped)
    is_clipped = (clipped < unclipped).astype(jnp.float32)

    if cfg.kl_coef > 0.0:
        ref = jnp.asarray(batch["ref_logprobs"], jnp.float32)
        if ref.shape != (b, s):
            raise ValueError(f"ref_logprobs {ref.shape} must match tokens {(b, s)}")
        kl = _kl(
            jnp.where(on, logp, 0.0),
            jnp.where(on, jax.lax.stop_gradient(ref), 0.0),
            cfg.kl_estimator,
        )
        loss_tok = pg + cfg.kl_coef * kl
    else:
        kl = jnp.zeros_like(pg)
        loss_tok = pg

    n_tok = mask.sum()
    if cfg.aggregation == "token":
        count = n_tok

        def reduce(x: jax.Array) -> jax.Array:
            return (x * mask).sum()
    else:
        n_row = mask.sum(axis=-1)
        has = (n_row > 0).astype(jnp.float32)
        count = has.sum()

        def reduce(x: jax.Array) -> jax.Array:
            return ((x * mask).sum(axis=-1) / jnp.maximum(n_row, 1.0) * has).sum()

    loss_sum = reduce(loss_tok)
    denom = jnp.maximum(count, 1.0)
    sg = jax.lax.stop_gradient
    aux = {
        "pg_loss": sg(reduce(pg) / denom),
        "kl": sg(reduce(kl) / denom),
        "clip_frac": sg(reduce(is_clipped) / denom),
        "ratio_mean": sg(reduce(ratio) / denom),
        "ratio_max": sg(jnp.where(on, ratio, 0.0).max()),
        "entropy_proxy": sg(reduce(-logp) / denom),
    }
    return loss_sum, count, aux


@dataclasses.dataclass(frozen=True)
class GRPOLoss:
    """`loss_fn(model, batch)` for `train_step`; hashable and equal by value, so equal configs
    share one jit compilation."""

    cfg: GRPOConfig
    chunk_size: int | None = 512

    def __call__(
        self, model: Transformer, batch: dict[str, Any]
    ) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
        return grpo_loss_sum_count(model, batch, self.cfg, self.chunk_size)


def make_grpo_loss(cfg: GRPOConfig, chunk_size: int | None = 512) -> GRPOLoss:
    """The GRPO loss as a static `loss_fn` for `learner.runtime.train_step.train_step`."""
    return GRPOLoss(cfg, chunk_size)
