"""Unseen sizes: does an OK candidate stay correct at one other size profile of its task?

A candidate that hard-codes the task's sizes (a grid computed for one batch size, a fixed
stride) passes every correctness input at the sizes it is scored on and breaks on any other.
Where a task declares other sizes (``SIZE_PROFILES``, docs/tasks.md), or, without them, has a
module-level batch-size constant (``batch_size = 16``, as KernelBench tasks do: a size that
changes only how many independent rows there are, so scaling it is safe), ``evalfarm.scoring`` runs
a second, short, correctness-only evaluation at one other profile after an OK verdict (fresh
judge and workers, its own secret seed, ``OTHER_SIZES_INPUTS`` correctness inputs, no timing,
and none of the set-up only timing needs: roofline, precision gate, degenerate-task probe)
and reports it as ``evidence.other_sizes``:

    {"profile": "default", "status": "ok" | "failed" | "not_applicable", "detail": "..."}

It is evidence, not part of the verdict, unless ``ScoreConfig.require_other_sizes`` is set:
then "failed" turns the verdict into INCORRECT. A check that cannot run for reasons that are
not the candidate's (the task fails or does not fit at that size: INFRA_ERROR) is
"not_applicable", never "failed".
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

from evalfarm.config import ScoreConfig
from evalfarm.result import ScoreResult
from evalfarm.tasks.format import Task
from evalfarm.verdict import Verdict

OTHER_SIZES_INPUTS = 5
OK, FAILED, NOT_APPLICABLE = "ok", "failed", "not_applicable"
# Module-level names taken as a batch size (the leading, independent dimension of the inputs).
BATCH_NAMES = ("batch_size", "batch", "batch_sz", "bs")
DERIVED_PROFILE = "scaled_batch"


def batch_constant(source: str) -> tuple[str, int] | None:
    """The task's module-level batch-size constant (name, value) assigned an int literal, or None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None
    for node in tree.body:
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if (isinstance(target, ast.Name) and target.id in BATCH_NAMES and isinstance(value, ast.Constant)
                and type(value.value) is int):
            return target.id, value.value
    return None


def with_derived_profile(task: Task) -> Task:
    """``task`` itself when it declares size profiles; else, where it has a batch-size constant of
    at least 2, a copy with one derived profile (``DERIVED_PROFILE``) that sets it to half plus
    one (16 -> 9: another size, odd, not a power of two, so a grid or stride computed for the
    scored size shows)."""
    if task.size_profiles:
        return task
    found = batch_constant(task.source)
    if found is None or found[1] < 2:
        return task
    name, value = found
    return dataclasses.replace(task, size_profiles={DERIVED_PROFILE: {name: value // 2 + 1}})


@dataclasses.dataclass(frozen=True)
class OtherSizes:
    """What the re-check at one other size profile found."""

    profile: str | None
    status: str  # OK, FAILED or NOT_APPLICABLE
    detail: str = ""
    verdict: str | None = None  # the correctness-only evaluation's verdict, when one ran
    correctness_inputs: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def other_profile(task: Task, evaluated: str) -> str | None:
    """The profile to re-check at: "default" after a named profile; after "default", "small"
    where the task has one, else its first named profile; None when the task declares no other."""
    names = ["default", *task.size_profiles]
    others = [n for n in names if n != evaluated]
    if not others:
        return None
    if evaluated != "default":
        return "default"
    return "small" if "small" in others else others[0]


def check_config(config: ScoreConfig, profile: str) -> ScoreConfig:
    """The correctness-only evaluation's options: the other profile, a few inputs, no re-checks."""
    return config.replace(size_profile=profile,
                          num_correctness_inputs=min(config.num_correctness_inputs, OTHER_SIZES_INPUTS),
                          reverify_above=0.0, check_other_sizes=False, require_other_sizes=False)


def not_applicable(task: Task, evaluated: str) -> OtherSizes:
    return OtherSizes(None, NOT_APPLICABLE, f"task {task.name} declares no size profile other than "
                      f"{evaluated!r} (SIZE_PROFILES, docs/tasks.md) and has no module-level batch-size "
                      f"constant ({', '.join(BATCH_NAMES)}) to scale")


def from_result(profile: str, result: ScoreResult, seconds: float) -> OtherSizes:
    """Classify the correctness-only evaluation's result."""
    n = result.evidence.correctness_inputs
    if result.verdict is Verdict.OK:
        return OtherSizes(profile, OK, f"{n} correctness input(s) at size profile {profile!r} matched the reference",
                          result.verdict.value, n, seconds)
    if result.verdict is Verdict.INFRA_ERROR:
        return OtherSizes(profile, NOT_APPLICABLE, f"the check at size profile {profile!r} could not run: "
                          f"{result.detail.strip()[:1000]}", result.verdict.value, n, seconds)
    return OtherSizes(profile, FAILED, f"{result.verdict.value} at size profile {profile!r}: "
                      f"{result.detail.strip()[:1000]}", result.verdict.value, n, seconds)


def apply(result: ScoreResult, check: OtherSizes, require: bool) -> ScoreResult:
    """Record the check in the evidence; with ``require``, a failed check makes the verdict INCORRECT."""
    result.evidence.other_sizes = check.to_dict()
    if check.seconds:
        result.evidence.phases_s["other_sizes"] = check.seconds
    if require and check.status == FAILED:
        return ScoreResult(verdict=Verdict.INCORRECT, speedup=None,
                           detail=f"other sizes (required): {check.detail}", evidence=result.evidence,
                           task=result.task, candidate_sha256=result.candidate_sha256)
    return result
