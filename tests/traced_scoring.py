"""Score a candidate with the round trace on (evalfarm.judge.round_trace) and return its lines too:
the exchange-level view the prepare-ahead and exchange-switch tests check."""

from __future__ import annotations

import json
from typing import Any

from evalfarm.judge.exchange import (
    GO_FIRST_ENV,
    JUDGE_SPIN_ENV,
    PREPARE_AHEAD_ENV,
    REFERENCE_POISON_ENV,
    ROUND_WRITE_ENV,
)
from evalfarm.judge.placement import PLACE_CALLS_ENV
from evalfarm.judge.round_trace import ROUND_TRACE_ENV
from evalfarm.scoring import score

# The judge's exchange switches: unset before each traced score, so only what a test sets applies.
EXCHANGE_SWITCHES = (GO_FIRST_ENV, JUDGE_SPIN_ENV, ROUND_WRITE_ENV, PREPARE_AHEAD_ENV, REFERENCE_POISON_ENV,
                     PLACE_CALLS_ENV)


def traced_score(monkeypatch: Any, tmp_path: Any, task: Any, candidate: Any, build_pool: Any, cfg: Any,
                 env: dict[str, str]) -> tuple[Any, list[dict[str, Any]]]:
    """(result, its round-trace lines) under ``cfg`` with the switches in ``env`` (others unset)."""
    monkeypatch.setenv(ROUND_TRACE_ENV, str(tmp_path))
    for name in EXCHANGE_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    r = score(task, candidate, cfg, build_pool=build_pool)
    (path,) = tmp_path.glob("rounds-*.jsonl")
    return r, [json.loads(x) for x in path.read_text().splitlines()]
