"""Conversions between the wire messages (evalfarm.v1) and the in-process records.

Protobuf stays at the edge: the daemon and the client convert here and work with
ScoreConfig / ScoreResult everywhere else.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from evalfarm.config import ConfigError, ScoreConfig
from evalfarm.infra_cause import InfraCause
from evalfarm.result import ScoreResult
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.verdict import Verdict

# ScoreConfig fields mirrored by ScoreOptions (everything but the device, which the daemon
# picks). tests/service/test_wire.py fails when ScoreConfig grows a field the proto lacks.
OPTION_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ScoreConfig)
    if f.name != "device" and f.name in pb.ScoreOptions.DESCRIPTOR.fields_by_name
)

_VERDICT_TO_PB = {v: pb.Verdict.Value(f"VERDICT_{v.value}") for v in Verdict}
_PB_TO_VERDICT = {n: v for v, n in _VERDICT_TO_PB.items()}
_CAUSE_TO_PB = {c: pb.InfraCause.Value(f"INFRA_CAUSE_{c.name}") for c in InfraCause}
_PB_TO_CAUSE = {n: c for c, n in _CAUSE_TO_PB.items()}

# What a draining daemon answers a new request with (UNAVAILABLE): the daemon writes it, a client
# reads it to say "draining", not "cannot reach".
DRAINING_DETAIL = "daemon draining: try another host"


def is_draining(details: str) -> bool:
    """Whether an UNAVAILABLE status's details say the daemon is draining (not unreachable)."""
    return details.startswith(DRAINING_DETAIL.split(":")[0])


# Keys the daemon adds to the ScoreResult JSON it sends back (not part of ScoreResult).
PHASES = ("build", "load", "correctness", "timing")


def verdict_to_pb(verdict: Verdict) -> int:
    return _VERDICT_TO_PB[verdict]


def verdict_from_pb(value: int) -> Verdict | None:
    return _PB_TO_VERDICT.get(value)


def options_to_pb(options: dict[str, Any] | ScoreConfig | None) -> pb.ScoreOptions:
    """Only the options given (or differing from the default, for a ScoreConfig) are set."""
    msg = pb.ScoreOptions()
    if options is None:
        return msg
    if isinstance(options, ScoreConfig):
        default = ScoreConfig()
        values = {k: v for k, v in options.to_dict().items() if getattr(default, k) != v}
    else:
        values = dict(options)
    values.pop("device", None)
    unknown = sorted(set(values) - set(OPTION_FIELDS))
    if unknown:
        raise ConfigError(f"unknown scoring option(s): {', '.join(unknown)}")
    for key, value in values.items():
        if value is None:
            continue
        try:
            setattr(msg, key, value)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"scoring option {key}={value!r}: {err}") from None
    return msg


def options_from_pb(msg: pb.ScoreOptions) -> dict[str, Any]:
    """The options that were set, as a plain dict (unset fields are left out)."""
    return {name: getattr(msg, name) for name in OPTION_FIELDS if msg.HasField(name)}


def config_from_pb(msg: pb.ScoreOptions, device: str) -> ScoreConfig:
    """Raises ConfigError for nonsense options."""
    values: dict[str, Any] = options_from_pb(msg)
    values["device"] = device
    return ScoreConfig.from_dict(values)


def result_to_pb(
    result: ScoreResult,
    *,
    sample_id: str,
    host: str,
    gpu_name: str,
    tags: dict[str, str] | None = None,
    queue_s: float = 0.0,
    total_s: float = 0.0,
    cached: bool = False,
    gpu_uuid: str = "",
    slot: int | None = None,
) -> pb.ScoredSample:
    ev = result.evidence
    timing = None
    if ev.timing is not None:
        t = ev.timing
        timing = pb.TimingEvidence(
            rounds=max(0, int(t.rounds)),
            raw_speedup=float(t.raw_speedup),
            ci_low=float(t.ci_low),
            ci_high=float(t.ci_high),
            bucket_variance=float(t.bucket_variance),
            stable=bool(t.stable),
            remeasured=max(0, int(t.remeasured)),
            ref_time_us_median=float(t.ref_time_us_median),
            cand_time_us_median=float(t.cand_time_us_median),
            seconds=float(t.seconds),
        )
    evidence = pb.Evidence(
        device=ev.device,
        device_name=ev.device_name,
        size_profile=ev.size_profile,
        correctness_inputs=max(0, int(ev.correctness_inputs)),
        timing=timing,
        guards=[str(g) for g in ev.guards],
        versions={str(k): str(v) for k, v in ev.versions.items()},
        cached=cached,
    )
    phases_s = ev.phases_s or {}
    phases = pb.PhaseTimings(
        queue_s=queue_s,
        build_s=float(phases_s.get("build", 0.0)),
        load_s=float(phases_s.get("load", 0.0)),
        correctness_s=float(phases_s.get("correctness", 0.0)),
        timing_s=float(phases_s.get("timing", 0.0)),
        total_s=total_s,
    )
    out = pb.ScoredSample(
        sample_id=sample_id,
        verdict=verdict_to_pb(result.verdict),
        detail=result.detail,
        evidence=evidence,
        evidence_json=json.dumps(result.to_dict(), default=str),
        host=host,
        gpu_name=gpu_name,
        phases=phases,
        task=result.task,
        candidate_sha256=result.candidate_sha256,
        tags=tags or {},
        gpu_uuid=gpu_uuid,
        slot=-1 if slot is None else slot,
        infra_cause=_CAUSE_TO_PB[result.cause] if result.cause is not None else pb.INFRA_CAUSE_UNSPECIFIED,
    )
    if result.speedup is not None:
        out.speedup = float(result.speedup)
    return out


def error_sample(sample_id: str, code: Any, message: str, host: str, tags: dict[str, str] | None = None) -> pb.ScoredSample:
    """A per-item error for ScoreStream: verdict unset, error carries the gRPC status."""
    code_value, code_name = code.value[0], code.name
    return pb.ScoredSample(
        sample_id=sample_id,
        verdict=pb.VERDICT_UNSPECIFIED,
        host=host,
        tags=tags or {},
        error=pb.ItemError(code=code_value, code_name=code_name, message=message),
    )


def result_from_pb(msg: pb.ScoredSample) -> ScoreResult:
    """The full ScoreResult (from evidence_json when present; else from the structured fields)."""
    if msg.evidence_json:
        try:
            result = ScoreResult.from_dict(json.loads(msg.evidence_json))
        except (ValueError, TypeError, KeyError):
            pass  # fall back to the structured fields
        else:
            if result.verdict is Verdict.INFRA_ERROR and msg.infra_cause in _PB_TO_CAUSE:
                result.infra_cause = _PB_TO_CAUSE[msg.infra_cause].value  # the wire's field decides
            return result
    verdict = verdict_from_pb(msg.verdict) or Verdict.INFRA_ERROR
    result = ScoreResult(
        verdict=verdict,
        speedup=msg.speedup if msg.HasField("speedup") else None,
        detail=msg.detail,
        task=msg.task,
        candidate_sha256=msg.candidate_sha256,
        infra_cause=_PB_TO_CAUSE.get(msg.infra_cause, InfraCause.OTHER).value if verdict is Verdict.INFRA_ERROR else "",
    )
    result.evidence.device = msg.evidence.device
    result.evidence.device_name = msg.evidence.device_name
    result.evidence.guards = list(msg.evidence.guards)
    result.evidence.versions = dict(msg.evidence.versions)
    return result
