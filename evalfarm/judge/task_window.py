"""A task window: one judge process serves several candidates of one task, one after the other.

The rule. A judge's set-up depends on the task, its size profile and the scoring settings, never
on the candidate: the task module, the reference model built and called (its first-call time,
output structure, memory facts, the degenerate-output check), its FLOPs, its float64 copy for the
precision gate, the device's facts and the memory plan's meta pass. A judge that an owner keeps
for a *window* (at most ``WindowSpec.max_candidates`` candidates, each request at most
``WindowSpec.idle_s`` after the previous result) makes that set-up once, for its first candidate,
and keeps it for the next ones whose request has the same ``window_key`` (``request_key``: every
setting but ``PER_CANDIDATE_SETTINGS``, which each evaluation reads from its own request). What is never kept
from one candidate to the next:

* the workers: after each candidate the judge kills and reaps both workers and everything they
  started (its own children, it is their subreaper), wipes their private directory, closes
  their arenas and staging areas, releases its GPU lease, and starts two fresh workers for the
  next candidate, which get fresh arenas;
* the inputs: every candidate gets its own secret (``InputSource.fresh``), so its correctness and
  timed rounds draw inputs no earlier candidate saw, and the precision gate's float64 ground
  truths are computed again from them. Nothing an earlier candidate could have left behind
  (files, shared memory, pairs of inputs and outputs) matches a later candidate's inputs;
* everything per evaluation: the bounds, the timing samples, the audit schedule, the evidence.

The judge is trusted code and runs no candidate code, so what it keeps was never in a
candidate's reach. A request whose key differs, or any result that is INFRA_ERROR (the farm's
own failure may have left the judge in a state nobody checked), ends the window: the judge then
leaves after its result. The owner (evalfarm.judge.standby.WarmJudges) routes a task's candidates
to a judge with an open window for its key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

# Defaults for an owner that keeps windows: a group of RL samples of one task is typically 8-16.
DEFAULT_MAX_CANDIDATES = 16
DEFAULT_IDLE_S = 30.0


class WindowSpecError(ValueError):
    """A window setting that cannot be used."""


@dataclasses.dataclass(frozen=True)
class WindowSpec:
    """How long a judge keeps its task: ``max_candidates`` evaluations in all (1: no window), each
    request within ``idle_s`` of the previous result."""

    max_candidates: int = DEFAULT_MAX_CANDIDATES
    idle_s: float = DEFAULT_IDLE_S

    def __post_init__(self) -> None:
        if isinstance(self.max_candidates, bool) or not isinstance(self.max_candidates, int) \
                or self.max_candidates < 1:
            raise WindowSpecError(f"a task window's candidates must be an integer >= 1 (1: no window), "
                                  f"got {self.max_candidates!r}")
        if not isinstance(self.idle_s, int | float) or isinstance(self.idle_s, bool) or not 0 < self.idle_s <= 3600:
            raise WindowSpecError(f"a task window's idle seconds must be in (0, 3600], got {self.idle_s!r}")

    @property
    def enabled(self) -> bool:
        return self.max_candidates > 1

    def to_dict(self) -> dict[str, Any]:
        return {"max_candidates": self.max_candidates, "idle_s": float(self.idle_s)}

    @classmethod
    def from_request(cls, request: dict[str, Any]) -> WindowSpec | None:
        """The request's window (None: none asked for, or one that cannot be used)."""
        raw = request.get("window")
        if not isinstance(raw, dict):
            return None
        try:
            spec = cls(int(raw.get("max_candidates", 1)), float(raw.get("idle_s", DEFAULT_IDLE_S)))
        except (TypeError, ValueError):
            return None
        return spec if spec.enabled else None


def window_key(task_source: str, size_profiles: dict[str, Any] | None, config: dict[str, Any]) -> str:
    """What a judge's set-up depends on, as one hash: the task's source and size profiles and the
    scoring settings (device, size profile, inputs, precision, tolerance, protocol, ...). Two
    requests with the same key may share a judge's set-up; any difference means a fresh set-up."""
    blob = json.dumps({"task": task_source, "profiles": size_profiles or {}, "config": config},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclasses.dataclass
class WindowState:
    """The judge's count of its window: which candidate this is (1-based) and how many may follow."""

    spec: WindowSpec
    key: str
    index: int = 1

    def evidence(self, shared: bool) -> dict[str, Any]:
        return {"index": self.index, "max_candidates": self.spec.max_candidates, "shared_setup": shared}

    def continues(self, verdict_is_infra: bool) -> bool:
        """Whether the judge stays for another candidate after this one's result."""
        return not verdict_is_infra and self.index < self.spec.max_candidates

    def next_request_fits(self, request: dict[str, Any]) -> bool:
        return request_key(request) == self.key


# Settings a task's set-up does not depend on: each candidate's own evaluation reads them from its
# request (the correctness inputs: how many rounds it runs, how the precision gate picks its rounds
# among them, each drawn from the candidate's own secret). So a re-measurement with fewer
# correctness inputs (evalfarm.reverify.second_config) is served by the window's judge.
PER_CANDIDATE_SETTINGS = ("num_correctness_inputs",)


def request_key(request: dict[str, Any]) -> str:
    """``window_key`` of a judge request (the owner's message to the judge), without
    ``PER_CANDIDATE_SETTINGS``; a correctness-only request (evalfarm.other_sizes) never shares a
    set-up with a scored one."""
    config = request.get("config")
    config = dict(config) if isinstance(config, dict) else {}
    for name in PER_CANDIDATE_SETTINGS:
        config.pop(name, None)
    config["correctness_only"] = bool(request.get("correctness_only"))
    return window_key(str(request.get("task_source", "")), request.get("size_profiles") or {}, config)
