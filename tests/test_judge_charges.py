"""The judge's charges for time a candidate's report leaves out (evalfarm.judge.charges)."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalfarm.config import ConfigError, ScoreConfig
from evalfarm.judge.charges import (
    EXCHANGE_SLACK_CALL_FRACTION,
    EXCHANGE_SLACK_FRACTION,
    EXCHANGE_SLACK_NS,
    PRE_CALL_SLACK_NS,
    clock_behind_events,
    exchange_charge_ns,
    pre_call_charge_ns,
)

leftovers = st.lists(st.integers(min_value=50_000, max_value=2_000_000), min_size=1, max_size=200)


@given(leftovers, st.integers(min_value=0, max_value=5_000_000))
def test_a_constant_excess_is_charged_in_full_beyond_the_slack_and_not_at_all_below(ref, excess):
    cand = [r + excess for r in ref]
    slack = EXCHANGE_SLACK_NS + EXCHANGE_SLACK_FRACTION * statistics.median(ref)
    assert exchange_charge_ns(ref, cand) == (excess if excess > slack else 0)


@given(leftovers, st.randoms(use_true_random=False))
def test_the_same_leftovers_in_another_order_are_charged_nothing_beyond_noise(ref, rng):
    # Paired per round, but a reordering is only noise: its median difference stays under the
    # slack when the spread is small, and is never negative-charged.
    cand = list(ref)
    rng.shuffle(cand)
    charge = exchange_charge_ns(ref, cand)
    assert charge >= 0
    if max(ref) - min(ref) <= EXCHANGE_SLACK_NS:
        assert charge == 0


def test_a_candidate_faster_than_the_reference_outside_its_call_is_not_credited():
    ref = [300_000] * 50
    assert exchange_charge_ns(ref, [200_000] * 50) == 0


def test_no_rounds_or_unpaired_rounds_charge_nothing():
    assert exchange_charge_ns([], []) == 0
    assert exchange_charge_ns([100_000, 100_000], [900_000]) == 0


def test_a_patched_clock_is_charged_the_real_call():
    # The worker reports 1 us calls that took 80 us: its leftover is 80 us longer each round.
    ref = [250_000 + 1_000 * (i % 7) for i in range(300)]
    cand = [r + 79_000 + 500 * (i % 3) for i, r in enumerate(ref)]
    assert 79_000 <= exchange_charge_ns(ref, cand) <= 80_000


def test_the_pre_call_charge_keeps_its_own_slack():
    ref = [20_000] * 10
    assert pre_call_charge_ns(ref, [20_000 + PRE_CALL_SLACK_NS] * 10) == 0
    assert pre_call_charge_ns(ref, [20_000 + PRE_CALL_SLACK_NS + 3_000] * 10) == PRE_CALL_SLACK_NS + 3_000


def test_a_long_call_is_allowed_a_share_of_its_own_time_after_it():
    # A 2 ms call whose memory traffic slows what follows it by 80 us is not charged; the same
    # 80 us after a 20 us call is.
    ref = [500_000] * 100
    cand = [580_000] * 100
    slack_base = EXCHANGE_SLACK_NS + EXCHANGE_SLACK_FRACTION * 500_000
    assert 80_000 > slack_base + EXCHANGE_SLACK_CALL_FRACTION * 20_000  # charged without the call's share
    assert exchange_charge_ns(ref, cand, [20_000] * 100) == 80_000
    assert 80_000 <= slack_base + EXCHANGE_SLACK_CALL_FRACTION * 2_000_000
    assert exchange_charge_ns(ref, cand, [2_000_000] * 100) == 0


def test_the_exchange_charge_is_on_for_a_gpu_and_off_for_a_cpu_unless_asked():
    from evalfarm.cli import build_parser
    from evalfarm.score_options import local_config

    parser = build_parser()

    def config(*extra: str) -> ScoreConfig:
        return local_config(parser.parse_args(["score", "--task", "L1/1", "--candidate", "c.py", *extra]))

    auto = config()
    assert auto.charge_exchange is None and auto.exchange_charged is False
    assert config("--device", "cuda").exchange_charged is True
    assert config("--device", "cuda:1", "--charge-exchange", "auto").exchange_charged is True
    assert config("--charge-exchange").charge_exchange is True and config("--charge-exchange").exchange_charged
    assert config("--charge-exchange", "on").exchange_charged is True
    off = config("--device", "cuda", "--charge-exchange", "off")
    assert off.charge_exchange is False and off.exchange_charged is False
    with pytest.raises(SystemExit):
        config("--charge-exchange", "sometimes")
    with pytest.raises(ConfigError, match="charge_exchange"):
        ScoreConfig(charge_exchange="yes")  # type: ignore[arg-type]


def test_the_exchange_charge_setting_crosses_the_wire_unset_true_or_false():
    from evalfarm.client.wire import config_from_pb, options_to_pb

    for value in (None, True, False):
        msg = options_to_pb({"charge_exchange": value})
        assert msg.HasField("charge_exchange") is (value is not None)
        assert config_from_pb(msg, "cuda").charge_exchange is value
    assert config_from_pb(options_to_pb(ScoreConfig(device="cpu")), "cuda").exchange_charged is True


# --- the candidate's clock against the CUDA events recorded inside its calls -------------------


def test_an_honest_calls_clock_encloses_its_events():
    # 150 us by the clock around the call, 145 us between the events inside it (an H200's L2/8 fast)
    assert clock_behind_events([(150_000, 145.0)] * 50) == ""
    # events a little ahead of the clock (the first event's launch), within the slack
    assert clock_behind_events([(100_000, 115.0)] * 50) == ""
    # a long call: within the share of its event time
    assert clock_behind_events([(1_000_000, 1_080.0)] * 50) == ""
    assert clock_behind_events([]) == ""


def test_a_clock_that_runs_behind_the_events_is_tampering():
    # a patched harness clock: 1 us per call by the clock, 30 us by the events
    reason = clock_behind_events([(1_000, 30.0)] * 100)
    assert "tampered" in reason and "30.0 us by CUDA events" in reason and "100 timed rounds" in reason
    # slowed rather than stopped: half the real time
    assert clock_behind_events([(200_000, 400.0)] * 100)


def test_the_clock_check_goes_by_the_median_round():
    honest, odd = (150_000, 145.0), (1_000, 400.0)
    assert clock_behind_events([honest] * 60 + [odd] * 40) == ""  # a minority of odd rounds: not decided by them
    assert clock_behind_events([honest] * 40 + [odd] * 60)
