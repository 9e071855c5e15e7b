"""Warm calls (ScoreConfig.warm_call): before each short timed call, both workers call their model
once, untimed, on the first inputs they were given, before the call's inputs are written."""

from __future__ import annotations

import re
import time

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.client.wire import config_from_pb, options_to_pb
from evalfarm.config import ConfigError
from evalfarm.judge.lone_calls import WARM_CALL_MAX_S, WARM_NOTE
from evalfarm.scoring import as_candidate, as_task, score

# Warm calls precede lone timed calls: these tests time lone calls (timed blocks need none).
QUICK = ScoreConfig(num_correctness_inputs=40, timing_budget_s=1.0, min_timed_rounds=35, timing_protocol="lone")
RUNTIME = "tests/adversarial/runtime"

# Raises when its first input comes back: only a warm call brings it again.
RAISES_IN_WARM_CALL = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
        self.first = None

    def forward(self, x):
        if self.first is None:
            self.first = x.clone()
        elif torch.equal(x, self.first):
            raise RuntimeError("called again on the first input")
        return torch.relu(x) * self.scale + self.bias
'''


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_scale.py"))


def _score(task, candidate, build_pool, **changes):
    return score(task, candidate, QUICK.replace(**changes), build_pool=build_pool)


def test_warm_calls_are_on_for_a_cpu_off_for_a_gpu_unless_set():
    assert ScoreConfig().warm_calls and not ScoreConfig(device="cuda").warm_calls
    assert ScoreConfig(device="cuda", warm_call=True).warm_calls
    assert not ScoreConfig(warm_call=False).warm_calls
    with pytest.raises(ConfigError, match="warm_call"):
        ScoreConfig(warm_call="yes")  # type: ignore[arg-type]
    for value in (True, False):
        assert config_from_pb(options_to_pb({"warm_call": value}), "cuda").warm_call is value
    assert config_from_pb(options_to_pb({}), "cuda").warm_call is None
    assert 0 < WARM_CALL_MAX_S <= 1e-3


def test_the_score_command_takes_warm_call():
    from evalfarm.cli import build_parser
    from evalfarm.score_options import local_config

    def config(*flags: str) -> ScoreConfig:
        return local_config(build_parser().parse_args(["score", "--task", "t", "--candidate", "c", *flags]))

    assert config().warm_call is None
    assert config("--warm-call").warm_call is True
    assert config("--warm-call", "off").warm_call is False
    assert config("--warm-call", "auto").warm_call is None


@pytest.mark.parametrize("warm", [True, False])
def test_an_honest_candidate_is_ok_with_warm_calls_on_and_off(task, data_dir, build_pool, warm):
    r = _score(task, as_candidate(str(data_dir / "cand_same.py")), build_pool, warm_call=warm)
    assert r.verdict is Verdict.OK, r.detail
    assert 0.5 < r.speedup < 2.0
    t = r.evidence.timing
    # This ~40 us task's timed rounds follow warm calls (all of them unless a loaded host pushed the
    # reference's running estimate over 1 ms for a batch), or none do.
    assert (0 < t.warm_call_rounds <= t.rounds) if warm else t.warm_call_rounds == 0, (
        t.warm_call_rounds, t.rounds, t.ref_time_us_median, t.block_rounds, t.set_aside_rounds)
    assert t.rounds >= QUICK.min_timed_rounds
    assert (WARM_NOTE in r.evidence.isolation) is warm, r.evidence.isolation


def test_no_warm_calls_where_the_reference_call_is_long(task, data_dir, build_pool):
    slow = (data_dir / "task_scale.py").read_text().replace(
        "        return y + 0.0", "        time.sleep(0.0015)\n        return y + 0.0").replace(
        "import torch\n", "import time\n\nimport torch\n", 1)
    assert "time.sleep" in slow
    r = score(as_task(slow), as_candidate(str(data_dir / "cand_same.py")),
              QUICK.replace(warm_call=True, min_timed_rounds=20, timing_budget_s=0.5), build_pool=build_pool)
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.timing.warm_call_rounds == 0, r.evidence.timing


def test_an_error_in_a_warm_call_is_the_candidates_and_says_where(task, build_pool):
    r = _score(task, as_candidate(RAISES_IN_WARM_CALL), build_pool, warm_call=True)
    assert r.verdict is Verdict.RUNTIME_ERROR, (r.verdict, r.detail)
    assert "untimed warm call" in r.detail and "called again on the first input" in r.detail
    assert _score(task, as_candidate(RAISES_IN_WARM_CALL), build_pool, warm_call=False).verdict is Verdict.OK


def test_a_warm_call_that_hangs_is_ended_at_the_per_call_bound(task, build_pool):
    hangs = RAISES_IN_WARM_CALL.replace('raise RuntimeError("called again on the first input")', "time.sleep(30)")
    hangs = hangs.replace("import torch\n", "import time\n\nimport torch\n", 1)
    assert "time.sleep(30)" in hangs
    start = time.monotonic()
    r = _score(task, as_candidate(hangs), build_pool, warm_call=True, min_call_timeout_s=0.5, first_call_timeout_s=0.5)
    assert r.verdict is Verdict.TIMEOUT, (r.verdict, r.detail)
    # The first round that follows a warm call is round 1 on an idle host; a loaded host can push the
    # reference's running estimate over the warm-call limit for a while, so a later round is the first.
    assert re.search(r"untimed warm call before round \d+ within", r.detail), r.detail
    assert time.monotonic() - start < 25  # the call's bound (0.5 s + slack + allowance), not the 60 s one


def test_output_kept_from_a_warm_call_fails_correctness(task, build_pool):
    r = _score(task, as_candidate(f"{RUNTIME}/warm_call_stash.py"), build_pool, warm_call=True)
    assert r.verdict is Verdict.INCORRECT, (r.verdict, r.detail)


def test_reading_ahead_in_the_arena_gains_nothing_with_warm_calls(task, build_pool):
    r = _score(task, as_candidate(f"{RUNTIME}/read_ahead_arena.py"), build_pool, warm_call=True)
    assert r.verdict is Verdict.INCORRECT, (r.verdict, r.detail)
