"""The timed rounds the judge audits: one at a random position in every window (judge.audits)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalfarm.judge.audits import AuditSchedule


@settings(max_examples=200, deadline=None)
@given(fraction=st.floats(0.01, 1.0), first=st.integers(0, 2000), windows=st.integers(1, 40),
       seed=st.integers(0, 2**32))
def test_every_correctness_round_and_one_round_per_window_are_audited(fraction, first, windows, seed):
    s = AuditSchedule(fraction, first, random.Random(seed))
    assert all(s.audited(r) for r in range(first))
    w = s.window
    assert w == max(1, round(1 / fraction))
    for k in range(windows):
        rounds = range(first + k * w, first + (k + 1) * w)
        assert sum(s.audited(r) for r in rounds) == 1
    timed = range(first, first + windows * w)
    assert [s.audited(r) for r in timed] == [s.audited(r) for r in timed]  # drawn once, then fixed


def test_no_timed_audits_at_zero_and_all_at_one():
    none = AuditSchedule(0.0, 5, random.Random(1))
    assert [none.audited(r) for r in range(8)] == [True] * 5 + [False] * 3
    every = AuditSchedule(1.0, 5, random.Random(1))
    assert all(every.audited(r) for r in range(50))
    with pytest.raises(ValueError, match="audit fraction"):
        AuditSchedule(1.5, 0, random.Random(1))


def test_a_candidate_wrong_in_every_timed_round_is_always_caught_in_the_first_window():
    # Independent draws at 10% let such a candidate through 35 timed rounds about 2.5% of the time.
    for seed in range(2000):
        s = AuditSchedule(0.1, 40, random.Random(seed))
        assert any(s.audited(r) for r in range(40, 50))


def test_positions_are_spread_over_the_window():
    positions = []
    for seed in range(2000):
        s = AuditSchedule(0.1, 0, random.Random(seed))
        positions.append(next(r for r in range(10) if s.audited(r)))
    counts = [positions.count(p) for p in range(10)]
    assert min(counts) > 120 and max(counts) < 280, counts  # 200 each on average
