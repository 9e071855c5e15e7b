"""Bootstrap confidence intervals for the learner's evaluation figures (numpy only).

The unit of resampling is a *cell*: one task under one seed, holding the mean of that cell's
samples. Resampling cells (not samples) keeps the samples of one prompt together, so a policy
that emits the same program for every sample of a task is not counted as many independent draws.

    ci = bootstrap_mean(cells)                   # mean and its 95% percentile interval
    d = paired_difference(after, before)         # cells matched by key; CI of mean(after - before)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

DEFAULT_RESAMPLES = 4000


@dataclasses.dataclass(frozen=True)
class Interval:
    """A point estimate, its percentile bootstrap interval, and how many cells it rests on."""

    estimate: float
    low: float
    high: float
    cells: int
    level: float = 0.95

    @property
    def excludes_zero(self) -> bool:
        """The interval lies on one side of 0. One cell resamples to itself (a zero-width
        "interval"), which is no evidence either way: it never excludes 0."""
        return self.cells >= 2 and (self.low > 0.0 or self.high < 0.0)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def format(self, unit: str = "") -> str:
        if self.cells == 0:
            return "n/a (no cells)"
        if self.cells == 1:
            return f"{self.estimate:+.3f}{unit} (one cell: no interval)"
        return (f"{self.estimate:+.3f}{unit} [{self.low:+.3f}, {self.high:+.3f}] "
                f"({int(round(self.level * 100))}% CI, {self.cells} cells)")


def bootstrap_mean(values: Sequence[float], *, resamples: int = DEFAULT_RESAMPLES, level: float = 0.95,
                   seed: int = 0) -> Interval:
    """Mean of `values` with a percentile bootstrap interval (cells resampled with replacement)."""
    x = np.asarray(values, np.float64)
    if x.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0, level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    means = x[idx].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return Interval(float(x.mean()), float(lo), float(hi), int(x.size), level)


def paired_difference(after: Mapping[Any, float], before: Mapping[Any, float], **kw: Any) -> Interval:
    """Mean over shared keys of after[k] - before[k], with a bootstrap interval over those keys."""
    keys = sorted(set(after) & set(before), key=repr)
    return bootstrap_mean([after[k] - before[k] for k in keys], **kw)


def difference_of_means(a: Sequence[float], b: Sequence[float], *, resamples: int = DEFAULT_RESAMPLES,
                        level: float = 0.95, seed: int = 0) -> Interval:
    """mean(a) - mean(b) for two independent sets of cells, each resampled on its own."""
    xa, xb = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if xa.size == 0 or xb.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0, level)
    rng = np.random.default_rng(seed)
    da = xa[rng.integers(0, xa.size, size=(resamples, xa.size))].mean(axis=1)
    db = xb[rng.integers(0, xb.size, size=(resamples, xb.size))].mean(axis=1)
    lo, hi = np.quantile(da - db, [(1 - level) / 2, 1 - (1 - level) / 2])
    return Interval(float(xa.mean() - xb.mean()), float(lo), float(hi), int(min(xa.size, xb.size)), level)
