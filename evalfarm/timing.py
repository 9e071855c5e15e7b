"""The paper's reward statistics, with adaptive stopping.

Each paired round gives one speedup t_ref / t_cand. Rounds are split, in the order they
were measured, into ``num_buckets`` contiguous buckets; the score is the median of the
bucket means. A bucket's mean is its interquartile mean (the mean of the middle half of its
round speedups): the plain mean of ratios used by the paper is dominated by single calls
that the OS or another process delayed, which on a shared host moved an identical
candidate's score between 1.1 and 1.9 in our measurements. A run whose bucket means spread too far (variance relative to the score
above ``max_bucket_variance``; the paper used 0.005) is discarded and measured again.
The 95% confidence interval is a t-interval over the bucket means; measuring stops once
its half-width is within ``target_ci`` of the score. The reported score is rounded to
two decimals toward 1.0 (1.118 -> 1.11, 0.992 -> 1.00).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

import numpy as np

# Two-sided 97.5% quantiles of Student's t for small degrees of freedom.
_T975 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 63: 1.998}


def t975(dof: int) -> float:
    if dof <= 1:
        return 12.706
    keys = sorted(_T975)
    for k in keys:
        if dof <= k:
            return _T975[k]
    return 1.96


def conservative_round(speedup: float) -> float:
    """Round to two decimals toward 1.0: 1.118 -> 1.11, 0.992 -> 1.00, 0.5 -> 0.5."""
    if not math.isfinite(speedup) or speedup <= 0:
        raise ValueError(f"speedup must be a positive finite number, got {speedup}")
    d = Decimal(repr(speedup))
    mode = ROUND_FLOOR if d >= 1 else ROUND_CEILING
    return float(d.quantize(Decimal("0.01"), rounding=mode))


@dataclasses.dataclass(frozen=True)
class BucketStats:
    rounds: int
    bucket_means: list[float]
    score: float  # median of bucket means, unrounded
    relative_variance: float  # var(bucket means) / score^2
    ci_low: float
    ci_high: float

    @property
    def ci_half_width_fraction(self) -> float:
        return (self.ci_high - self.ci_low) / 2 / self.score if self.score > 0 else math.inf


def interquartile_mean(values: np.ndarray) -> float:
    """Mean of the middle half of the values (all of them when there are fewer than 4)."""
    v = np.sort(values)
    if v.size < 4:
        return float(v.mean())
    lo, hi = v.size // 4, v.size - v.size // 4
    return float(v[lo:hi].mean())


def bucket_stats(speedups: Sequence[float], num_buckets: int = 7) -> BucketStats:
    """Statistics of per-round speedups in measurement order."""
    x = np.asarray(speedups, dtype=np.float64)
    if x.size < num_buckets:
        raise ValueError(f"need at least {num_buckets} rounds, got {x.size}")
    means = np.array([interquartile_mean(b) for b in np.array_split(x, num_buckets)])
    score = float(np.median(means))
    var = float(np.var(means, ddof=1))
    rel_var = var / score**2 if score > 0 else math.inf
    half = t975(num_buckets - 1) * math.sqrt(var / num_buckets)
    return BucketStats(int(x.size), [float(m) for m in means], score, rel_var, score - half, score + half)


@dataclasses.dataclass(frozen=True)
class StopDecision:
    stop: bool
    stable: bool
    discard: bool  # throw the rounds away and measure again (spread too large)
    reason: str


def decide(
    stats: BucketStats | None,
    *,
    elapsed_s: float,
    budget_s: float,
    min_rounds: int,
    target_ci: float,
    max_bucket_variance: float,
    remeasures_left: int,
    min_rounds_first: bool = False,
) -> StopDecision:
    """Whether to stop measuring, given the rounds so far and the time used.

    ``min_rounds_first``: the minimum rounds are collected even after the budget ran out (for
    an evaluation whose correctness rounds gave no timing samples and may have used the budget)."""
    out_of_time = elapsed_s >= budget_s
    if stats is None or stats.rounds < min_rounds:
        if out_of_time and not min_rounds_first:
            return StopDecision(True, False, False, "time budget ran out before the minimum rounds")
        return StopDecision(False, True, False, "collecting")
    spread_ok = stats.relative_variance <= max_bucket_variance
    if spread_ok and stats.ci_half_width_fraction <= target_ci:
        return StopDecision(True, True, False, "confidence interval within target")
    if out_of_time:
        return StopDecision(True, spread_ok, False, "time budget ran out")
    # Spread too large with most of the budget left: the paper discards such runs.
    if not spread_ok and remeasures_left > 0 and elapsed_s < budget_s / 2:
        return StopDecision(False, False, True, "bucket spread too large; measuring again")
    return StopDecision(False, spread_ok, False, "collecting")
