"""What a scoring returns: a verdict, a score and the evidence behind it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from evalfarm.infra_cause import InfraCause
from evalfarm.infra_cause import parse as parse_cause
from evalfarm.verdict import Verdict


@dataclasses.dataclass
class TimingEvidence:
    """How the speedup was measured."""

    rounds: int = 0  # timed paired rounds used for the score (warm-up excluded)
    bucket_means: list[float] = dataclasses.field(default_factory=list)
    bucket_variance: float = 0.0  # variance of bucket means / score^2
    ci_low: float = 0.0
    ci_high: float = 0.0
    stable: bool = True  # False when the bucket spread stayed above the limit
    remeasured: int = 0  # times the rounds were discarded for spread and measured again
    raw_speedup: float = 0.0  # median of bucket means before rounding
    ref_time_us_median: float = 0.0  # whole-call time (device-synchronised wall clock)
    cand_time_us_median: float = 0.0
    ref_event_us_median: float | None = None  # CUDA-event time of the same calls (GPU only)
    cand_event_us_median: float | None = None
    event_wall_gap: float | None = None  # cand wall/event ratio; large means work off the timed stream
    audited_rounds: int = 0
    seconds: float = 0.0
    # Rounds run while a standby judge of the same device was still starting up: their outputs
    # were checked, their times set aside (evalfarm.judge.serve.RoundsHold).
    set_aside_rounds: int = 0
    # Correctness rounds run in blocks (ScoreConfig.correctness_block): their outputs were checked;
    # their inputs were all written before the block, so their times are never used.
    block_rounds: int = 0
    # How those blocks went, a diagnostic never used for the score (evalfarm.judge.correctness.BlockLog):
    # count; per worker the median over blocks of the mean call and of the mean leftover per round
    # (call_us_reference, leftover_us_candidate, ...); and the median ratio of the reference's
    # block calls to the candidate's, split by whose block ran first (ref_over_cand_reference_first,
    # blocks_candidate_first, ...). None without blocks.
    blocks: dict[str, Any] | None = None
    # Timed rounds whose calls each followed an untimed warm call of the same model on earlier
    # inputs, in both workers (ScoreConfig.warm_call).
    warm_call_rounds: int = 0
    # The untimed moment before each call (L2 flush and sync, after the inputs were written), median
    # per worker, and what was added to every candidate call for its excess (evalfarm.judge.charges).
    pre_call_ref_us_median: float | None = None
    pre_call_cand_us_median: float | None = None
    pre_call_charge_us: float = 0.0
    # The judge's own clock: each exchange (go sent, result received) minus the call time the
    # worker reported, median per worker; the candidate's excess over the reference's beyond
    # noise (always measured), and what of it was added to every candidate call (where
    # ScoreConfig.exchange_charged, by default on a GPU; the larger of the two charges applies).
    untimed_ref_us_median: float | None = None
    untimed_cand_us_median: float | None = None
    exchange_excess_us: float = 0.0
    exchange_charge_us: float = 0.0
    # How the timed rounds ran (ScoreConfig.timing_protocol): "blocks" (queued back to back, each
    # call's inputs released right before it: evalfarm.judge.timed_blocks) or "lone" (one call per
    # exchange); and how many timed rounds ran in blocks (their first calls checked, not timed).
    protocol: str = "lone"
    timed_block_rounds: int = 0
    # Timed blocks: each worker's median share of its blocks' tails (last call seen done to its
    # reply, per call), on the judge's clock; the candidate's excess beyond noise is in the charge.
    tail_ref_us_median: float | None = None
    tail_cand_us_median: float | None = None


@dataclasses.dataclass
class Evidence:
    device: str = ""
    device_name: str = ""
    clocks: dict[str, Any] = dataclasses.field(default_factory=dict)
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    size_profile: str = "default"
    correctness_inputs: int = 0
    inputs_on_device: bool = False
    worst_error: dict[str, Any] = dataclasses.field(default_factory=dict)
    timing: TimingEvidence | None = None
    build: dict[str, Any] = dataclasses.field(default_factory=dict)
    phases_s: dict[str, float] = dataclasses.field(default_factory=dict)
    guards: list[str] = dataclasses.field(default_factory=list)  # guard notes (what fired, or warnings)
    # Set when an outlier score was measured again: {"speedup", "agreed", "where"}.
    reverified: dict[str, Any] = dataclasses.field(default_factory=dict)
    # What the candidate's process was isolated with, as its worker reported it, e.g.
    # ["network namespace", "no process limit: RLIMIT_NPROC not effective: running as root"].
    isolation: list[str] = dataclasses.field(default_factory=list)
    # The sandbox every candidate of this host gets, from the check a daemon makes at start
    # (evalfarm.sandbox.isolation.assess): "strong: ..." or "WEAK: <what is missing>", and for a daemon
    # that serves anyway, "(served with --allow-weak-sandbox)".
    sandbox: str = ""
    # The physical-floor gate (GPU only, evalfarm.judge.floor.physical_floor): {"applied",
    # "violated", "output_bytes", "l2_bytes", "peak_dram_bytes_s", "floor_us", "cand_time_us_median",
    # "ref_time_us_median", "note", and NVML's "mem_clock_max_mhz", "memory_bus_width_bits", "nvml"
    # where it was read}. Empty on CPU. Older readers drop it (ScoreResult.from_dict).
    physical_floor: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Every static finding on the candidate (source, inline C++/CUDA, built symbols), blocking or
    # not: {"guard", "reason", "line", "blocking", ...}. Static analysis testifies; only findings
    # with "blocking" decided the verdict (docs/security.md).
    static_findings: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # What the judge found about the task itself, e.g. {"degenerate": "<why>"} when the
    # reference's output does not depend on its inputs (no speedup is paid on such a task).
    task_flags: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The device-memory plan (GPU only, evalfarm.judge.memory_plan): the task's footprint, what the
    # evaluation needs and what the device had free; on every device the rounds per batch the
    # arenas hold ("rounds_per_batch", and with timed blocks "timed_rounds_per_batch").
    memory: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Correctness at one other size profile (evalfarm.other_sizes): {"profile", "status": "ok" |
    # "failed" | "not_applicable", "detail"}. Empty when the check was not asked for.
    other_sizes: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Diagnostics asked for by `evalfarm score --profile / --save-failing-input`
    # (evalfarm.judge.diagnose): {"profile": {...}, "failing_input": {...}}, with the files written.
    diagnostics: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The precision gate (evalfarm.judge.precision): {"applied", "rounds", "widened_rounds", "ref_error",
    # "cand_error", "ratio", "k", "floor", "group", "metric", "ground_truth_device", "widened_inputs",
    # "outputs": [per output and group of rounds], "notes"}; {"applied": False, "note"} where it does
    # not apply (precision=tolerance, the paper policy, no float16/bfloat16/float32 output, no float64
    # ground truth). Set in the set-up and after the last gated round.
    precision: dict[str, Any] = dataclasses.field(default_factory=dict)
    # How close the calls are to the hardware (evalfarm.judge.roofline), for an OK result: {"flops",
    # "bytes", "bytes_parts", "arithmetic_intensity", "ref": {"time_us", "tflops", "tbps",
    # "flop_fraction", "byte_fraction"}, "cand": {...}, "peaks": {"flops_per_s", "dram_bytes_s", ...}}.
    # Fractions are null where the device's peaks are unknown (a CPU, a GPU not in the table).
    roofline: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Where the judge served several candidates of this task (evalfarm.judge.task_window): {"index"
    # (this candidate's place, 1-based), "max_candidates", "shared_setup" (the task's set-up was an
    # earlier candidate's), "setup_spared_s", "reference_memo": {"rounds_reused" (correctness rounds
    # checked against reference outputs an earlier candidate's evaluation kept), "rounds_kept",
    # "kept_mib", "budget_mib"} or {"off": why none are kept} (evalfarm.judge.reference_memo)}.
    # Empty for a judge of one evaluation.
    task_window: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ScoreResult:
    verdict: Verdict
    speedup: float | None = None  # rounded score; None unless verdict is OK
    detail: str = ""  # human-readable reason for a non-OK verdict
    evidence: Evidence = dataclasses.field(default_factory=Evidence)
    task: str = ""
    candidate_sha256: str = ""
    # For an INFRA_ERROR, why (evalfarm.infra_cause: other, deadline, draining, task_too_large),
    # which decides the client's retry and the slot's blame; "" for any other verdict.
    infra_cause: str = ""

    def __post_init__(self) -> None:
        if self.verdict is Verdict.INFRA_ERROR and not self.infra_cause:
            self.infra_cause = InfraCause.OTHER.value

    @property
    def cause(self) -> InfraCause | None:
        """The INFRA_ERROR's cause (None for any other verdict)."""
        return parse_cause(self.infra_cause) if self.verdict is Verdict.INFRA_ERROR else None

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["verdict"] = self.verdict.value
        return out

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScoreResult:
        ev = dict(data.get("evidence") or {})
        timing = ev.pop("timing", None)
        # Fields this version does not know (a newer daemon's evidence) are dropped, not fatal.
        evidence = Evidence(**_known(Evidence, ev))
        if timing is not None:
            evidence.timing = TimingEvidence(**_known(TimingEvidence, timing))
        return cls(
            verdict=Verdict(data["verdict"]),
            speedup=data.get("speedup"),
            detail=data.get("detail", ""),
            evidence=evidence,
            task=data.get("task", ""),
            candidate_sha256=data.get("candidate_sha256", ""),
            infra_cause=str(data.get("infra_cause") or ""),
        )

    @classmethod
    def failure(cls, verdict: Verdict, detail: str, **kwargs: Any) -> ScoreResult:
        return cls(verdict=verdict, speedup=None, detail=detail, **kwargs)


def _known(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if k in names}


def describe(result: ScoreResult) -> str:
    """A short human summary of a result."""
    lines = [f"verdict: {result.verdict.value}"]
    if result.speedup is not None:
        lines.append(f"speedup: {result.speedup:.2f}x")
    t = result.evidence.timing
    if t is not None:
        lines.append(f"timing:  {t.rounds} rounds, ref {t.ref_time_us_median:.1f} us, cand {t.cand_time_us_median:.1f} us, "
                     f"95% CI [{t.ci_low:.3f}, {t.ci_high:.3f}], {'stable' if t.stable else 'UNSTABLE'}")
        if not t.stable:
            lines.append(f"         UNSTABLE: the rounds did not settle within the budget (bucket means' relative "
                         f"variance {t.bucket_variance:.2g}, {t.rounds} rounds), so this score may move from run to "
                         "run: score again on a quiet host (nothing else using its CPU or GPU), or give it more "
                         "time (--budget 30)")
    if result.evidence.device_name:
        lines.append(f"device:  {result.evidence.device} ({result.evidence.device_name})")
    if result.detail:
        lines.append("detail:  " + result.detail.strip().replace("\n", "\n         "))
    for g in result.evidence.guards:
        lines.append(f"guard:   {g}")
    other = result.evidence.other_sizes
    if other:
        lines.append(f"sizes:   other size profile {other.get('profile') or '-'}: {other.get('status')} "
                     f"({other.get('detail', '')})")
    for kind, diag in result.evidence.diagnostics.items():
        files = diag.get("files") or ([diag["json"]] if diag.get("json") else [])
        note = diag.get("note") or diag.get("ncu_note") or ""
        lines.append(f"{kind}: " + ", ".join(files) + (f" ({note})" if note else ""))
    return "\n".join(lines)
