"""What `evalfarm score` prints on stderr while it scores one candidate locally: a banner that
says what will run (and how to skip the extra checks), then each phase as it starts, with its
bound. ``evalfarm.scoring.Evaluation`` reports the phases (its ``progress`` callback)."""

from __future__ import annotations

import sys
import time
from typing import IO

from evalfarm import other_sizes, reverify
from evalfarm.config import ScoreConfig
from evalfarm.tasks.format import Task


def extra_checks(task: Task, config: ScoreConfig, evaluated_profile: str) -> list[str]:
    """The checks that may run after the verdict's own rounds, each with the flag that skips or sets it."""
    lines = []
    if config.reverify_above > 0:
        n = reverify.second_config(config).num_correctness_inputs
        lines.append(f"re-verification: an OK score above {config.reverify_above:g}x is measured again with fresh "
                     f"workers and new inputs ({n} correctness inputs, then timing) and kept only if the two agree "
                     "within 10% (--reverify-above 0 skips it)")
    else:
        lines.append("re-verification: off (--reverify-above 0)")
    if config.other_sizes_wanted:
        profile = other_sizes.other_profile(other_sizes.with_derived_profile(task), evaluated_profile)
        if profile is None:
            lines.append(f"other sizes: none to check (the task has no size profile but {evaluated_profile!r} and no batch-size constant to scale)")
        else:
            how = ("required: a failure there makes the verdict INCORRECT" if config.require_other_sizes
                   else "evidence only; --no-other-sizes skips it, --require-other-sizes makes it decide")
            lines.append(f"other sizes: after an OK verdict, correctness at size profile {profile!r} "
                         f"({min(config.num_correctness_inputs, other_sizes.OTHER_SIZES_INPUTS)} inputs; {how})")
    else:
        lines.append("other sizes: off (--no-other-sizes)")
    return lines


def banner(candidate: str, task: Task, config: ScoreConfig, evaluated_profile: str) -> str:
    head = (f"scoring {candidate} against {task.name} on {config.device} (size profile {evaluated_profile}): "
            f"a few seconds to minutes")
    return "\n".join([head, *(f"  then {line}" for line in extra_checks(task, config, evaluated_profile))])


class PhasePrinter:
    """``Evaluation``'s progress callback: one line per phase as it starts, with its bound."""

    def __init__(self, config: ScoreConfig, stream: IO[str] | None = None) -> None:
        self.config = config
        self.stream = stream
        self.started = time.monotonic()

    def line(self, phase: str, facts: dict[str, object]) -> str | None:
        """The line for a phase (None: nothing to say, e.g. the inner phases of a re-check)."""
        c = self.config
        run = facts.get("run", "first")
        if run != "first" and phase in ("load", "correctness", "timing"):
            return None  # a re-verification or other-size check has its own line
        if phase == "static":
            from evalfarm.guards.bounded import DEFAULT_TIMEOUT_S

            return f"static analysis of the source and its inline C++/CUDA (at most {DEFAULT_TIMEOUT_S:g} s)"
        if phase == "build":
            return f"build: compiling its load_inline extensions (at most {c.build_timeout_s:g} s; cached by content)"
        if phase == "gpu_wait":
            return (f"waiting for the GPU, held by another evaluation ({facts.get('holders') or 'unknown'}); "
                    f"at most {c.gpu_lease_timeout_s:g} s, not charged to the candidate")
        if phase == "load":
            return f"load: reference and candidate in their own processes (at most {c.load_timeout_s:g} s)"
        if phase == "correctness":
            return (f"correctness: {c.num_correctness_inputs} inputs checked against the reference (each call at "
                    f"most {c.timeout_factor:g}x the reference's time, the first calls {c.first_call_timeout_s:g} s "
                    "more)")
        if phase == "timing":
            return (f"timing: paired rounds until the 95% CI is within +/-{c.target_ci:.0%} (at most "
                    f"{c.timing_budget_s:g} s from the first round)")
        if phase == "reverify":
            n = reverify.second_config(c).num_correctness_inputs
            return (f"re-verification: {facts.get('speedup')}x is above {c.reverify_above:g}x, measuring again in "
                    f"fresh workers with new inputs ({n} correctness inputs, then timing; same bounds; "
                    "--reverify-above 0 skips it)")
        if phase == "other_sizes":
            n = min(c.num_correctness_inputs, other_sizes.OTHER_SIZES_INPUTS)
            return (f"other sizes: correctness at size profile {facts.get('profile')!r}, {n} inputs "
                    f"(at most {c.load_timeout_s:g} s to load; --no-other-sizes skips it)")
        return None

    def __call__(self, phase: str, facts: dict[str, object]) -> None:
        text = self.line(phase, facts)
        if text is None:
            return
        stream = self.stream or sys.stderr
        print(f"[{time.monotonic() - self.started:5.1f} s] {text}", file=stream, flush=True)
