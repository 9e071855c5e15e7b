"""The reward statistics: buckets, robust means, rounding, stopping."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalfarm.timing import bucket_stats, conservative_round, decide, interquartile_mean


@pytest.mark.parametrize("raw, rounded", [(1.118, 1.11), (0.992, 1.0), (1.0, 1.0), (2.999, 2.99),
                                          (0.5, 0.5), (0.123, 0.13), (17.456, 17.45), (1.0049, 1.0)])
def test_conservative_round_examples(raw, rounded):
    assert conservative_round(raw) == rounded


@given(st.floats(min_value=1e-3, max_value=1e4, allow_nan=False))
def test_conservative_round_moves_toward_one_by_less_than_a_cent(x):
    r = conservative_round(x)
    assert abs(r - x) < 0.01 + 1e-9
    assert (x >= 1 and 1 <= r <= x + 1e-12) or (x < 1 and x - 1e-12 <= r <= 1)
    assert math.isclose(r * 100, round(r * 100), abs_tol=1e-6)


def test_conservative_round_rejects_nonsense():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            conservative_round(bad)


def test_interquartile_mean_ignores_a_preempted_call():
    values = np.array([1.0] * 99 + [100.0])
    assert interquartile_mean(values) == pytest.approx(1.0)
    assert values.mean() > 1.9  # the paper's plain mean would be dragged away


def test_bucket_stats_median_of_bucket_means_and_ci():
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 0.05, 7 * 50)
    s = bucket_stats(x, 7)
    assert len(s.bucket_means) == 7 and s.rounds == 350
    assert s.score == pytest.approx(np.median(s.bucket_means))
    assert s.ci_low < 2.0 < s.ci_high
    assert s.relative_variance < 1e-3
    with pytest.raises(ValueError):
        bucket_stats([1.0] * 6, 7)


def test_buckets_follow_measurement_order():
    x = [1.0] * 70 + [3.0] * 70  # a drift shows up as spread between buckets
    s = bucket_stats(x, 7)
    assert s.bucket_means[0] == 1.0 and s.bucket_means[-1] == 3.0
    assert s.relative_variance > 0.005


def test_decide_stops_when_ci_is_tight_and_discards_spread_early():
    tight = bucket_stats([2.0 + 1e-4 * (i % 3) for i in range(140)], 7)
    kw = dict(budget_s=10.0, min_rounds=70, target_ci=0.01, max_bucket_variance=0.005)
    d = decide(tight, elapsed_s=1.0, remeasures_left=2, **kw)
    assert d.stop and d.stable
    spread = bucket_stats([1.0] * 70 + [3.0] * 70, 7)
    d = decide(spread, elapsed_s=1.0, remeasures_left=2, **kw)
    assert d.discard and not d.stop
    d = decide(spread, elapsed_s=1.0, remeasures_left=0, **kw)
    assert not d.discard and not d.stop
    d = decide(spread, elapsed_s=11.0, remeasures_left=2, **kw)
    assert d.stop and not d.stable
    assert not decide(None, elapsed_s=1.0, remeasures_left=2, **kw).stop


def test_decide_can_collect_the_minimum_rounds_after_the_budget():
    kw = dict(budget_s=10.0, min_rounds=70, target_ci=0.01, max_bucket_variance=0.005, remeasures_left=2)
    few = bucket_stats([2.0] * 35, 7)
    assert decide(few, elapsed_s=11.0, **kw).stop  # the default: out of time is out of time
    assert not decide(few, elapsed_s=11.0, min_rounds_first=True, **kw).stop
    assert not decide(None, elapsed_s=11.0, min_rounds_first=True, **kw).stop
    enough = bucket_stats([2.0 + 0.5 * ((i // 10) % 2) for i in range(70)], 7)  # spread: only the budget stops it
    assert decide(enough, elapsed_s=11.0, min_rounds_first=True, **kw).stop
    assert not decide(enough, elapsed_s=1.0, min_rounds_first=True, **kw).stop
