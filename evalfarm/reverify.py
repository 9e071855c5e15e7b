"""Outlier re-verification: the one rule, shared by local scoring and the farm client.

DESIGN: "Any score > 3, or > 2x the best seen for the task, is re-measured on a different
GPU and kept only if within 10%". This module owns the constants, the decision whether a
result needs a second measurement (`needs_reverification`) and how the two measurements
become one result (`merge`). Where the second measurement runs is the caller's business:
`evalfarm.scoring` runs it on the same device with fresh workers and a new secret (in the
task window's judge where one is open: evalfarm.judge.task_window, else a fresh judge); the farm client
(`evalfarm.client.core`) sends it, marked as a re-verification, to another daemon with the
same GPU model, or to the same daemon when there is no such other daemon.

The merge, with s1 and s2 the raw (unrounded) speedups of the two measurements:

* second OK and |s2 - s1| <= 10% of s1: agreed; the first result is kept.
* second OK and further apart: disagreed; the measurement with the lower raw speedup is
  kept (verdict OK), with a note in ``detail`` and ``evidence.guards``.
* second a candidate verdict (INCORRECT, TIMEOUT, HACK_DETECTED, ...): the candidate is not
  reliably what the first run saw; the second result replaces the first, and its ``detail``
  says so.
* second INFRA_ERROR (or an OK without a speedup): the re-measurement could not run; the
  first result is kept, marked as not re-verified (``evidence.reverified["status"]`` is
  ``"not_reverified"``, with a note in ``detail`` and ``evidence.guards``) - never silently.

Every merged result carries ``evidence.reverified``::

    {"status": "agreed" | "disagreed" | "failed" | "not_reverified",
     "agreed": bool, "first_speedup": s1, "speedup": s2 or None, "tolerance": 0.1,
     "where": "...", "verdict": <second verdict>, ... plus what the caller adds (host, ...)}

The reported speedup is rounded once, here, with `evalfarm.timing.conservative_round` of
the kept measurement's raw speedup.

What the second measurement runs (``second_config``, both callers): the first's options, with at
most ``REVERIFY_CORRECTNESS_INPUTS`` correctness inputs. The first measurement established
correctness on its own inputs (1000 by default); the second is there to measure the speed again,
in fresh workers with a new secret, so its inputs are new too: its own correctness inputs are
checked, and its timed rounds audited, as in any evaluation (a failure there is a candidate
verdict, as above), but it does not pay for the whole correctness phase a second time.
``evidence.reverified["correctness_inputs"]`` says how many it checked, and ``seconds`` what it
took (its evaluation's ``phases_s["total"]``, or the caller's own clock; None where neither is known).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from evalfarm.result import ScoreResult
from evalfarm.timing import conservative_round
from evalfarm.verdict import Verdict

if TYPE_CHECKING:
    from evalfarm.config import ScoreConfig

REVERIFY_ABOVE = 3.0  # re-measure any score above this (ScoreConfig.reverify_above's default)
REVERIFY_FACTOR = 2.0  # ... or above this multiple of the best score seen for the task
AGREEMENT = 0.10  # two measurements agree when the second is within 10% of the first

AGREED, DISAGREED, FAILED, NOT_REVERIFIED = "agreed", "disagreed", "failed", "not_reverified"
# The second measurement's correctness inputs, at most (``second_config``).
REVERIFY_CORRECTNESS_INPUTS = 100


def second_config(config: ScoreConfig) -> ScoreConfig:
    """The second measurement's options: ``config`` with at most ``REVERIFY_CORRECTNESS_INPUTS``
    correctness inputs (see the module doc)."""
    return config.replace(num_correctness_inputs=min(config.num_correctness_inputs, REVERIFY_CORRECTNESS_INPUTS))


def raw_speedup(result: ScoreResult) -> float:
    """The unrounded speedup (timing evidence), else the reported one; 0.0 when there is none."""
    t = result.evidence.timing
    if t is not None and t.raw_speedup > 0 and math.isfinite(t.raw_speedup):
        return float(t.raw_speedup)
    return float(result.speedup or 0.0)


def needs_reverification(
    result: ScoreResult, *, above: float = REVERIFY_ABOVE, best: float | None = None
) -> bool:
    """Whether an OK score must be measured a second time.

    ``above`` is the absolute threshold on the reported score (0 disables re-verification
    altogether); ``best`` is the best score accepted so far for the task, when the caller
    keeps one (the farm client does; a single local scoring does not).
    """
    if above <= 0 or result.verdict is not Verdict.OK or result.speedup is None:
        return False
    score = float(result.speedup)
    if score > above:
        return True
    return best is not None and best > 0 and score > REVERIFY_FACTOR * best


def agree(s1: float, s2: float) -> bool:
    """Two raw speedups agree when the second is within 10% of the first."""
    return abs(s2 - s1) <= AGREEMENT * s1


def _fmt(speedup: float) -> str:
    return f"{conservative_round(speedup):g}x" if speedup > 0 and math.isfinite(speedup) else f"{speedup:g}x"


def _append(detail: str, note: str) -> str:
    return f"{detail}; {note}" if detail else note


def merge(
    first: ScoreResult,
    second: ScoreResult,
    *,
    where: str,
    info: Mapping[str, Any] | None = None,
    first_label: str = "",
    second_label: str = "",
) -> ScoreResult:
    """One result from an outlier's first measurement and its re-measurement (see the module doc).

    ``where`` says how the second measurement was made (e.g. "fresh process, same device",
    "another daemon"); ``info`` adds caller fields to ``evidence.reverified`` (host, endpoint,
    ...); the labels name where each measurement ran in the notes. Neither input is modified.
    """
    s1 = raw_speedup(first)
    record: dict[str, Any] = {"first_speedup": s1, "speedup": None, "tolerance": AGREEMENT, "where": where,
                              "verdict": second.verdict.value,
                              "correctness_inputs": second.evidence.correctness_inputs,
                              "seconds": second.evidence.phases_s.get("total"), **(info or {})}
    at1 = f" on {first_label}" if first_label else ""
    at2 = f" on {second_label}" if second_label else ""

    if second.verdict is Verdict.OK and second.speedup is not None:
        s2 = raw_speedup(second)
        record["speedup"] = s2
        agreed = agree(s1, s2)
        kept = copy.deepcopy(first if agreed or s1 <= s2 else second)
        kept.speedup = conservative_round(raw_speedup(kept))
        record.update(status=AGREED if agreed else DISAGREED, agreed=agreed)
        if not agreed:
            note = (f"re-verification disagreed: {_fmt(s1)}{at1}, {_fmt(s2)}{at2} ({where}) differ by more "
                    f"than {AGREEMENT:.0%}; reporting the lower")
            kept.detail = _append(kept.detail, note)
            kept.evidence.guards.append(f"reverify: {note}")
        kept.evidence.reverified = record
        return kept

    record["agreed"] = False
    if second.verdict in (Verdict.INFRA_ERROR, Verdict.OK):  # OK without a speedup: nothing measured
        kept = copy.deepcopy(first)
        kept.speedup = conservative_round(s1) if s1 > 0 else first.speedup
        record.update(status=NOT_REVERIFIED, detail=second.detail[:2000])
        note = f"not re-verified: the re-measurement ({where}) could not run: {second.detail[:300]}"
        kept.detail = _append(kept.detail, note)
        kept.evidence.guards.append(f"reverify: {note}")
        kept.evidence.reverified = record
        return kept

    kept = copy.deepcopy(second)
    record["status"] = FAILED
    kept.detail = f"first run scored {_fmt(s1)}{at1} but the re-measurement ({where}) failed{at2}: {second.detail}"
    kept.evidence.reverified = record
    return kept
