"""One budget rule (evalfarm.eval_budget): a slow-but-finite candidate gets the same verdict,
TIMEOUT, scored locally and by a real daemon through the client, under the same deadline."""

from __future__ import annotations

import time

from evalfarm import scoring
from evalfarm.client import FarmClient
from evalfarm.config import ScoreConfig
from evalfarm.eval_budget import (
    JUDGE_ALLOWANCE_S,
    evaluation_deadline_s,
    judge_budget_s,
    overrun_detail,
    run_budget,
    stuck_detail,
)
from evalfarm.tasks import builtin_suite
from evalfarm.tasks.format import parse_candidate
from evalfarm.verdict import Verdict

from .conftest import TINY

DEADLINE_S = 12.0
CALL_SLEEP_S = 2.0  # 20 correctness inputs alone: 40 s of calls, well past the deadline


def slow_copy(task_id: str) -> str:
    """The task's own model, slower by CALL_SLEEP_S a call: correct, finite, too slow."""
    return (builtin_suite().load(task_id).source + "\n\nimport time as _time\n\n\n"
            "class ModelNew(Model):\n    def forward(self, *args):\n"
            f"        _time.sleep({CALL_SLEEP_S})\n        return super().forward(*args)\n")


def test_the_rule_in_figures() -> None:
    cfg = ScoreConfig(timing_budget_s=10.0)
    own = judge_budget_s(cfg)
    assert own == cfg.load_timeout_s + 40.0 + JUDGE_ALLOWANCE_S
    assert run_budget(cfg, None).seconds == own and not run_budget(cfg, None).by_deadline
    assert run_budget(cfg, own + 1).seconds == own and not run_budget(cfg, own + 1).by_deadline
    near = run_budget(cfg, 5.0)
    assert near.seconds == 5.0 and near.by_deadline
    assert run_budget(cfg, -1.0).seconds == 0.0
    assert "deadline of 7 s" in overrun_detail(cfg, near, 7.0)
    assert "wall budget" in overrun_detail(cfg, run_budget(cfg, None), None)
    # The daemon's max_eval_s is the deadline of a request that gives none, and caps a longer one.
    assert evaluation_deadline_s(0.0, 1800.0) == 1800.0
    assert evaluation_deadline_s(60.0, 1800.0) == 60.0
    assert evaluation_deadline_s(3600.0, 1800.0) == 1800.0
    assert stuck_detail(60.0, 30.0).startswith("deadline exceeded")  # final at the client


def test_a_slow_candidate_is_timeout_locally_and_on_the_farm(spawn_daemon, build_pool) -> None:
    source = slow_copy("L1/1")
    t0 = time.monotonic()
    local = scoring.score("L1/1", parse_candidate(source), ScoreConfig(**TINY), build_pool=build_pool,
                          deadline_s=DEADLINE_S)
    local_s = time.monotonic() - t0
    assert local.verdict is Verdict.TIMEOUT, local.detail
    assert f"deadline of {DEADLINE_S:g} s" in local.detail
    assert local_s < DEADLINE_S + 60  # ended at its deadline, not after the 80 s its calls would take

    d = spawn_daemon("--slots", "1")
    with FarmClient([d.target], poll_interval_s=0.3, reverify=False) as farm:
        remote = farm.score("L1/1", source, options=dict(TINY), deadline_s=DEADLINE_S)
    # The same verdict: a candidate verdict (rewarded as a failure), not an INFRA_ERROR the
    # learner would drop from its update.
    assert remote.verdict is Verdict.TIMEOUT, remote.result.detail
    assert f"deadline of {DEADLINE_S:g} s" in remote.result.detail

