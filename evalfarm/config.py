"""Scoring options. One frozen record, validated on construction."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from evalfarm.reverify import REVERIFY_ABOVE

TolerancePolicy = Literal["strict", "kernelbench"]


class ConfigError(ValueError):
    """A scoring option is out of range or inconsistent."""


# The allowed range of every numeric option: (low, high, low included, high included). Floats
# must also be finite and ints real ints (not bools), so NaN, infinities, 1e300 and impossible
# limits are refused here, at the edge, with the field's name, instead of reaching a judge.
_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "num_correctness_inputs": (1, 100_000, True, True),
    "timing_budget_s": (0.0, 3600.0, False, True),
    "target_ci": (0.0, 1.0, False, False),
    "num_buckets": (3, 64, True, True),
    "max_bucket_variance": (0.0, 1.0, False, True),
    "min_timed_rounds": (3, 1_000_000, True, True),
    "warmup_rounds": (0, 10_000, True, True),
    "audit_fraction": (0.0, 1.0, True, True),
    "timeout_factor": (1.0, 1e6, True, True),
    "min_call_timeout_s": (0.0, 3600.0, False, True),
    "load_timeout_s": (0.0, 3600.0, False, True),
    "first_call_timeout_s": (0.0, 3600.0, True, True),
    "build_timeout_s": (0.0, 7200.0, False, True),
    "memory_limit_bytes": (64 << 20, 1 << 50, True, True),
    "file_size_limit_bytes": (1 << 20, 1 << 50, True, True),
    "reverify_above": (0.0, 1e6, True, True),
    "gpu_lease_timeout_s": (0.0, 86400.0, False, True),
}


def _check_range(name: str, value: object, field_type: type) -> None:
    lo, hi, lo_in, hi_in = _RANGES[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or (field_type is int and not isinstance(value, int)):
        raise ConfigError(f"{name} must be {'an integer' if field_type is int else 'a number'}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be finite, got {value!r}")
    if (value < lo if lo_in else value <= lo) or (value > hi if hi_in else value >= hi):
        raise ConfigError(f"{name} must be in {'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class ScoreConfig:
    """How one candidate is scored.

    Defaults follow the paper's protocol where it is explicit (1000 correctness inputs,
    7 buckets, variance limit 0.005, conservative rounding) and are tighter where it
    is not (adaptive stopping at +/-1% CI within a 10 s budget instead of 30 minutes).
    """

    device: str = "cpu"  # "cpu", "cuda" or "cuda:N"
    num_correctness_inputs: int = 1000
    tolerance: TolerancePolicy = "strict"
    # Which static findings decide a verdict alone (evalfarm.guards.policy): "honest" (default:
    # only what is unsafe to run or invisible at run time), "paper" (KernelBench's rules: no reduced
    # precision, side streams, host threads or CUDA graphs), "strict", or "permissive" (= honest).
    guard_policy: str = "honest"
    # Timing protocol.
    timing_budget_s: float = 10.0
    target_ci: float = 0.01  # stop when the 95% CI half-width of the score is within this fraction
    num_buckets: int = 7
    max_bucket_variance: float = 0.005  # variance of bucket means relative to the score
    min_timed_rounds: int = 70
    warmup_rounds: int = 5
    audit_fraction: float = 0.1  # share of timed candidate outputs checked against the reference (judge.audits)
    # Executability.
    timeout_factor: float = 1000.0  # a call may take this many times the reference's time
    min_call_timeout_s: float = 2.0
    load_timeout_s: float = 120.0
    # Extra time, shared by the calls before the first timed round (round < max(warmup_rounds, 1)),
    # for work a first call may do lazily: building, autotuning, torch.compile, load_inline in forward.
    first_call_timeout_s: float = 60.0
    build_timeout_s: float = 180.0
    # Which of the task's size profiles to use: "auto" = "small" on CPU when the task has one.
    size_profile: str = "auto"
    # Resource limits for the candidate process.
    memory_limit_bytes: int = 16 << 30
    file_size_limit_bytes: int = 1 << 30
    # Outlier re-verification: an OK score above this is measured again with fresh workers
    # (a new secret seed) and kept only if the two agree within 10%; else the lower one
    # is returned. 0 disables it.
    reverify_above: float = REVERIFY_ABOVE
    # Unseen sizes (evalfarm.other_sizes): after an OK verdict, re-check correctness at one other
    # size profile of the task (a second, short correctness-only evaluation) and report it as
    # evidence.other_sizes. Off by default here (it costs a second evaluation per OK candidate);
    # `evalfarm score` turns it on. require_other_sizes implies the check and makes a failure
    # there INCORRECT.
    check_other_sizes: bool = False
    require_other_sizes: bool = False
    # The judge times every exchange with a worker itself; the candidate's leftover beyond the
    # call it reported, over the reference's, is always measured and reported
    # (timing.exchange_excess_us). Charged, it is also added to every candidate call, which stops
    # a candidate that changes the call times its own process reports (a patched clock).
    # None (the default): charged on a GPU, where 49 honest kernels showed none on an H100, and
    # not on a CPU, where on a host shared by concurrent evaluations honest candidates' leftovers
    # were measured milliseconds over the reference's (docs/security.md). True or False: always
    # or never (see exchange_charged).
    charge_exchange: bool | None = None
    # A GPU evaluation holds its GPU alone (evalfarm.judge.gpu_lease): another evaluation on the
    # same GPU of this host waits for it at most this long, then returns INFRA_ERROR. The wait is
    # not charged to the candidate (evidence.phases_s["gpu_lease_wait"] says how long it was).
    gpu_lease_timeout_s: float = 600.0
    # Correctness blocks: the correctness rounds after the warm-up (max(warmup_rounds, 1) <= round <
    # num_correctness_inputs) run a batch at a time, one exchange per worker per batch instead of one
    # per call (evalfarm.judge.correctness): all of a block's inputs are written
    # before it starts, so its calls' times are never used for the score (only checked, and counted
    # as timing.block_rounds); the score's timed rounds all come after correctness. Used only
    # where a batch holds at least 8 rounds (small inputs and outputs: correctness.MIN_BLOCK_ROUNDS),
    # or 2 with timed blocks, whose correctness rounds are never samples (MIN_BLOCK_ROUNDS_TIMED).
    # False: every round is one call whose inputs are written right before it starts.
    correctness_block: bool = True
    # Warm calls: before each timed call (one call per exchange) whose reference is estimated under
    # judge.WARM_CALL_MAX_S, each worker calls its model once, untimed, on the first inputs it was
    # given (a copy it keeps; never the coming call's, which are written after), in its preparation,
    # and discards the output. A call that follows the judge's exchange runs slower than one that
    # follows another call of the same model (caches, the allocator, the thread pool gone cold), on
    # both sides, which compresses short calls' ratios towards 1 (docs/security.md, "Warm calls").
    # None (the default): on a CPU, where it was measured to narrow that; not on a GPU until measured
    # there. True or False: always or never (see warm_calls).
    warm_call: bool | None = None
    # How the score's timed rounds run (evalfarm.judge.timed_blocks): "blocks" (the default) queues a
    # batch of calls back to back in each worker, each call's fresh inputs released by the judge
    # right before it may start, as the device runs a model's calls; "lone" times one call per
    # exchange with the judge (the earlier protocol: a short call then pays the exchange's idle
    # device and launch latency, which compresses its speedup towards 1). Inputs over
    # timed_blocks.STAGING_MAX_BYTES per round keep lone calls.
    timing_protocol: str = "blocks"
    # How a candidate's precision is judged (evalfarm.judge.precision): "fp64" (the default) also
    # compares, on a few correctness rounds (some with widened inputs: random signs), both the
    # reference's error and the candidate's against a float64 ground truth, and refuses a candidate
    # whose error is more than k times the reference's plus a small floor (INCORRECT); "tolerance"
    # checks outputs against the reference by tolerance only, as before. The paper guard policy
    # keeps tolerance only too (KernelBench's rules).
    precision: str = "fp64"

    def __post_init__(self) -> None:
        dev = self.device
        if not (dev == "cpu" or dev == "cuda" or (dev.startswith("cuda:") and dev[5:].isdigit())):
            raise ConfigError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {dev!r}")
        for f in dataclasses.fields(self):
            if f.name in _RANGES:
                _check_range(f.name, getattr(self, f.name), int if f.type in ("int", int) else float)
        if self.tolerance not in ("strict", "kernelbench"):
            raise ConfigError(f"tolerance must be 'strict' or 'kernelbench', got {self.tolerance!r}")
        from evalfarm.guards.policy import GuardPolicy

        if self.guard_policy not in GuardPolicy.NAMES:
            raise ConfigError(f"guard_policy must be one of {', '.join(GuardPolicy.NAMES)}, got {self.guard_policy!r}")
        for name in ("check_other_sizes", "require_other_sizes", "correctness_block"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.charge_exchange is not None and not isinstance(self.charge_exchange, bool):
            raise ConfigError(f"charge_exchange must be true, false or unset (None: charged on a GPU only), "
                              f"got {self.charge_exchange!r}")
        if self.warm_call is not None and not isinstance(self.warm_call, bool):
            raise ConfigError(f"warm_call must be true, false or unset (None: on a CPU only), got {self.warm_call!r}")
        if self.timing_protocol not in ("blocks", "lone"):
            raise ConfigError(f"timing_protocol must be 'blocks' or 'lone', got {self.timing_protocol!r}")
        if self.precision not in ("fp64", "tolerance"):
            raise ConfigError(f"precision must be 'fp64' or 'tolerance', got {self.precision!r}")
        if self.min_timed_rounds < self.num_buckets:
            raise ConfigError("min_timed_rounds must be at least num_buckets")

    @property
    def other_sizes_wanted(self) -> bool:
        return self.check_other_sizes or self.require_other_sizes

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def precision_gate(self) -> bool:
        """Whether the float64 precision gate applies: precision "fp64" and a policy other than paper."""
        return self.precision == "fp64" and self.guard_policy != "paper"

    @property
    def exchange_charged(self) -> bool:
        """Whether the exchange excess is added to the candidate's calls: charge_exchange, or
        when it is unset, whether the evaluation runs on a GPU."""
        return self.is_cuda if self.charge_exchange is None else self.charge_exchange

    @property
    def warm_calls(self) -> bool:
        """Whether short timed calls follow an untimed warm call: warm_call, or when it is unset,
        whether the evaluation runs on a CPU."""
        return not self.is_cuda if self.warm_call is None else self.warm_call

    def replace(self, **changes: object) -> ScoreConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, object]) -> ScoreConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown scoring option(s): {', '.join(unknown)}")
        return cls(**values)  # type: ignore[arg-type]
