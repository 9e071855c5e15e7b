"""Scoring options are checked at the edge: every numeric option finite, of its type and in range."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalfarm.config import _RANGES, ConfigError, ScoreConfig

NUMERIC = sorted(_RANGES)


def test_every_numeric_option_has_a_range():
    numeric = {f.name for f in dataclasses.fields(ScoreConfig) if f.type in ("int", "float")}
    assert numeric == set(_RANGES)


@pytest.mark.parametrize(("field", "value"), [
    ("first_call_timeout_s", float("nan")), ("min_call_timeout_s", float("inf")), ("load_timeout_s", 1e300),
    ("max_bucket_variance", float("nan")), ("timeout_factor", float("nan")), ("memory_limit_bytes", 1),
    ("memory_limit_bytes", 2**64 - 1), ("file_size_limit_bytes", 0), ("reverify_above", float("inf")),
    ("num_correctness_inputs", 10.0), ("warmup_rounds", True), ("timing_budget_s", "5"),
])
def test_impossible_options_are_refused_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        ScoreConfig(**{field: value})


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(NUMERIC),
       value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70)))
def test_any_number_is_either_in_range_or_a_config_error(field, value):
    lo, hi, lo_in, hi_in = _RANGES[field]
    try:
        cfg = ScoreConfig(**{field: value})
    except ConfigError:
        return
    got = getattr(cfg, field)
    assert not isinstance(got, bool)
    assert math.isfinite(got)
    assert (got >= lo if lo_in else got > lo) and (got <= hi if hi_in else got < hi)
