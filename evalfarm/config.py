"""Scoring options. One frozen record, validated on construction."""

from __future__ import annotations

import dataclasses
from typing import Literal

TolerancePolicy = Literal["strict", "kernelbench"]


class ConfigError(ValueError):
    """A scoring option is out of range or inconsistent."""


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
    audit_fraction: float = 0.1  # share of timed candidate outputs checked against the reference
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
    # Outlier re-verification: an OK score above this is measured again in a fresh judge and
    # worker (new secret seed) and kept only if the two agree within 10%; else the lower one
    # is returned. 0 disables it.
    reverify_above: float = 3.0

    def __post_init__(self) -> None:
        dev = self.device
        if not (dev == "cpu" or dev == "cuda" or (dev.startswith("cuda:") and dev[5:].isdigit())):
            raise ConfigError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {dev!r}")
        if not 1 <= self.num_correctness_inputs <= 100_000:
            raise ConfigError("num_correctness_inputs must be in [1, 100000]")
        if self.tolerance not in ("strict", "kernelbench"):
            raise ConfigError(f"tolerance must be 'strict' or 'kernelbench', got {self.tolerance!r}")
        from evalfarm.guards.policy import GuardPolicy

        if self.guard_policy not in GuardPolicy.NAMES:
            raise ConfigError(f"guard_policy must be one of {', '.join(GuardPolicy.NAMES)}, got {self.guard_policy!r}")
        if not 0.0 < self.timing_budget_s <= 3600:
            raise ConfigError("timing_budget_s must be in (0, 3600]")
        if not 0.0 < self.target_ci < 1.0:
            raise ConfigError("target_ci must be in (0, 1)")
        if not 3 <= self.num_buckets <= 64:
            raise ConfigError("num_buckets must be in [3, 64]")
        if self.max_bucket_variance <= 0:
            raise ConfigError("max_bucket_variance must be > 0")
        if self.min_timed_rounds < self.num_buckets:
            raise ConfigError("min_timed_rounds must be at least num_buckets")
        if self.warmup_rounds < 0:
            raise ConfigError("warmup_rounds must be >= 0")
        if not 0.0 <= self.audit_fraction <= 1.0:
            raise ConfigError("audit_fraction must be in [0, 1]")
        if self.timeout_factor < 1 or self.min_call_timeout_s <= 0 or self.load_timeout_s <= 0:
            raise ConfigError("timeouts must be positive and timeout_factor >= 1")
        if self.first_call_timeout_s < 0:
            raise ConfigError("first_call_timeout_s must be >= 0")
        if self.build_timeout_s <= 0:
            raise ConfigError("build_timeout_s must be > 0")
        if not self.reverify_above >= 0:  # also rejects NaN
            raise ConfigError("reverify_above must be >= 0 (0 disables re-verification)")

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

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
