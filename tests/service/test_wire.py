"""Wire conversions: options <-> ScoreConfig, ScoreResult <-> ScoredSample."""

from __future__ import annotations

import dataclasses

import pytest

from evalfarm.client.wire import (
    config_from_pb,
    options_from_pb,
    options_to_pb,
    result_from_pb,
    result_to_pb,
)
from evalfarm.config import ConfigError, ScoreConfig
from evalfarm.result import Evidence, ScoreResult, TimingEvidence
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.verdict import Verdict


def test_every_score_config_field_is_on_the_wire() -> None:
    wire = set(pb.ScoreOptions.DESCRIPTOR.fields_by_name)
    fields = {f.name for f in dataclasses.fields(ScoreConfig)} - {"device"}
    assert fields <= wire, f"add {sorted(fields - wire)} to ScoreOptions in evalfarm.proto"


def test_options_round_trip_and_defaults() -> None:
    msg = options_to_pb({"num_correctness_inputs": 20, "tolerance": "kernelbench", "timing_budget_s": 0.5})
    assert options_from_pb(msg) == {"num_correctness_inputs": 20, "tolerance": "kernelbench",
                                    "timing_budget_s": 0.5}
    cfg = config_from_pb(msg, "cuda:1")
    assert cfg.device == "cuda:1" and cfg.num_correctness_inputs == 20
    assert cfg.target_ci == ScoreConfig().target_ci  # unset = default
    assert options_from_pb(options_to_pb(ScoreConfig(num_buckets=9))) == {"num_buckets": 9}
    with pytest.raises(ConfigError):
        options_to_pb({"bogus": 1})
    with pytest.raises(ConfigError):
        config_from_pb(pb.ScoreOptions(num_buckets=1), "cpu")


def test_result_round_trip() -> None:
    res = ScoreResult(
        verdict=Verdict.OK, speedup=2.5, task="L1/1_NewGELU", candidate_sha256="ab" * 32,
        evidence=Evidence(device="cpu", device_name="x", phases_s={"build": 1.0, "load": 2.0},
                          timing=TimingEvidence(rounds=70, ci_low=2.4, ci_high=2.6), guards=["g"]),
    )
    msg = result_to_pb(res, sample_id="s", host="h", gpu_name="cpu", tags={"k": "v"}, queue_s=0.5)
    assert msg.verdict == pb.VERDICT_OK and msg.speedup == 2.5 and msg.phases.load_s == 2.0
    assert msg.evidence.timing.rounds == 70 and msg.tags["k"] == "v" and msg.phases.queue_s == 0.5
    assert result_from_pb(msg) == res
    fail = result_to_pb(ScoreResult.failure(Verdict.INCORRECT, "bad"), sample_id="s", host="h", gpu_name="")
    assert not fail.HasField("speedup")
    fail.evidence_json = ""
    assert result_from_pb(fail).verdict is Verdict.INCORRECT and result_from_pb(fail).detail == "bad"
