"""The farm client and local scoring re-verify with the same rule: same inputs, same results."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest

from evalfarm import reverify
from evalfarm.client import FarmClient
from evalfarm.config import ScoreConfig
from evalfarm.result import Evidence, ScoreResult, TimingEvidence
from evalfarm.scoring import Evaluation
from evalfarm.verdict import Verdict

from .conftest import FakeBackend, fake_source


def ok(raw: float) -> ScoreResult:
    from evalfarm.timing import conservative_round

    return ScoreResult(verdict=Verdict.OK, speedup=conservative_round(raw),
                       evidence=Evidence(device="cpu", timing=TimingEvidence(rounds=35, raw_speedup=raw)))


class ScriptedBackend(FakeBackend):
    """The n-th evaluation returns the n-th scripted result (as the judge would have)."""

    def __init__(self, results: list[ScoreResult]) -> None:
        super().__init__()
        self.results = results

    def __call__(self, task, candidate, config, build_pool, deadline_s=None):  # noqa: ANN001, ANN204
        ev = super().__call__(task, candidate, config, build_pool, deadline_s)
        scripted = copy.deepcopy(self.results[min(self.started, len(self.results)) - 1])
        scripted.task, scripted.candidate_sha256 = task.name, candidate.sha256
        ev._result = scripted
        return ev


CASES = {
    "agree": (ok(5.004), ok(5.3)),
    "agree_high_22x": (ok(22.37), ok(21.9)),
    "disagree_lower_second": (ok(8.0), ok(1.1)),
    "disagree_higher_second": (ok(4.0), ok(9.0)),
    "raw_disagrees_rounded_agrees": (ok(3.0149), ok(3.3199)),
    "second_incorrect": (ok(6.0), ScoreResult.failure(Verdict.INCORRECT, "output mismatch")),
    "second_infra": (ok(6.0), ScoreResult.failure(Verdict.INFRA_ERROR, "judge died")),
}

COMMON_KEYS = ("status", "agreed", "first_speedup", "speedup", "tolerance", "verdict")


def _local(first: ScoreResult, second: ScoreResult, configs: list[ScoreConfig] | None = None) -> ScoreResult:
    """Evaluation._reverify with a stand-in judge run returning ``second``; the second run's options
    go to ``configs``."""
    def judge_run(arch: str, config: ScoreConfig | None = None) -> ScoreResult:
        if configs is not None:
            configs.append(config)
        return copy.deepcopy(second)

    fake = SimpleNamespace(config=ScoreConfig(device="cpu"), _cancelled=False, _judge_run=judge_run,
                           _tell=lambda *_a, **_k: None)
    return Evaluation._reverify(fake, copy.deepcopy(first), "cpu")


def _summary(r: ScoreResult) -> dict[str, Any]:
    rv = r.evidence.reverified
    raw = r.evidence.timing.raw_speedup if r.evidence.timing else None
    return {"verdict": r.verdict, "speedup": r.speedup, "raw": raw, **{k: rv.get(k) for k in COMMON_KEYS}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_client_and_local_paths_agree(daemon_factory, case: str) -> None:
    first, second = CASES[case]
    local_configs: list[ScoreConfig] = []
    local = _local(first, second, local_configs)
    backend = ScriptedBackend([first, second])
    d = daemon_factory(backend=backend)
    with FarmClient([d.target], poll_interval_s=0.2, max_attempts=1) as farm:
        remote = farm.score("L1/1", fake_source(salt=case), deadline_s=20).result
    assert backend.started == 2
    # Both paths run the second measurement with the options evalfarm.reverify gives it.
    (local_second,) = local_configs
    remote_first, remote_second = (ev.config for ev in backend.evaluations)
    assert local_second.num_correctness_inputs == remote_second.num_correctness_inputs \
        == min(remote_first.num_correctness_inputs, reverify.REVERIFY_CORRECTNESS_INPUTS)
    assert _summary(remote) == _summary(local)
    assert remote.evidence.reverified["status"] == local.evidence.reverified["status"]
    assert ("not re-verified" in remote.detail) is ("not re-verified" in local.detail)
    assert ("disagreed" in remote.detail) is ("disagreed" in local.detail)
