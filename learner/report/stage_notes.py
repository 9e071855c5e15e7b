"""What the evaluation samples say beyond the paper's table: which program each policy emits,
whether a stage moved the numbers (bootstrap over tasks), and the figures the report prints.

An evaluation sample is a dict with at least ``task``, ``verdict``, ``speedup`` (None unless
OK) and ``program``: the name of the known program its code is (``fast:<label>``,
``reference``, ``slowed``, ``wrong:<label>``), ``new:<sha8>`` for code no known program has, or
``unparsed`` when the response broke the protocol. ``heldout`` marks tasks kept out of RL.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from learner.report.stats import Interval, paired_difference

PROGRAM_CLASSES: tuple[str, ...] = ("fast", "reference", "slowed", "wrong", "new", "unparsed")


def program_class(name: str) -> str:
    """'fast:row_scale' -> 'fast'; 'new:1a2b' -> 'new'."""
    head = name.split(":", 1)[0]
    return head if head in PROGRAM_CLASSES else "new"


def program_shares(samples: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Share of samples per program class (PROGRAM_CLASSES order, every class present)."""
    n = len(samples)
    counts = collections.Counter(program_class(str(s.get("program", "unparsed"))) for s in samples)
    return {c: (counts.get(c, 0) / n if n else 0.0) for c in PROGRAM_CLASSES}


def program_counts(samples: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Samples per program name (by code hash), most frequent first."""
    counts = collections.Counter(str(s.get("program", "unparsed")) for s in samples)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def speedup0(s: Mapping[str, Any]) -> float:
    """The paper's per-sample figure: the speedup, or 0 for a failure."""
    return float(s["speedup"]) if s.get("speedup") is not None else 0.0


def cells(samples: Sequence[Mapping[str, Any]], value: str = "speedup", seed: Any = None) -> dict[Any, float]:
    """Per (task, seed) cell: the mean of `value` over its samples ("speedup": failures as 0;
    "fast": 1 when the sample is a fast program)."""
    groups: dict[Any, list[float]] = collections.defaultdict(list)
    for s in samples:
        v = speedup0(s) if value == "speedup" else float(program_class(str(s.get("program", ""))) == value)
        groups[(s["task"], s.get("seed", seed))].append(v)
    return {k: float(np.mean(v)) for k, v in groups.items()}


def stage_moves(labelled: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[tuple[str, str, Interval]]:
    """For consecutive labels (in order): mean speedup (failures as 0) after - before, paired by
    task, with a 95% bootstrap interval."""
    labels = list(labelled)
    return [(a, b, paired_difference(cells(labelled[b]), cells(labelled[a])))
            for a, b in zip(labels, labels[1:], strict=False)]


def verdict_sentence(before: str, after: str, d: Interval) -> str:
    if d.cells == 0:
        return f"{after} vs {before}: no shared tasks to compare."
    if d.cells == 1:
        return (f"{after} vs {before}: mean speedup changed by {d.format('x')}; one task cannot tell "
                "a change from noise.")
    if not d.excludes_zero:
        return (f"{after} vs {before}: mean speedup changed by {d.format('x')}; the interval includes 0: "
                "this stage did not measurably move the policy.")
    way = "raised" if d.estimate > 0 else "lowered"
    return f"{after} vs {before}: this stage {way} the mean speedup by {d.format('x')}."


def program_table_md(labelled: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    out = ["| label | " + " | ".join(PROGRAM_CLASSES) + " |", "|:---|" + "---:|" * len(PROGRAM_CLASSES)]
    for label, samples in labelled.items():
        sh = program_shares(samples)
        out.append(f"| {label} | " + " | ".join(f"{100 * sh[c]:.0f}%" for c in PROGRAM_CLASSES) + " |")
    return "\n".join(out) + "\n"


def program_table_text(labelled: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    width = max([len(label) for label in labelled] + [5])
    out = ["label".ljust(width) + "".join(c.rjust(11) for c in PROGRAM_CLASSES)]
    for label, samples in labelled.items():
        sh = program_shares(samples)
        out.append(label.ljust(width) + "".join(f"{100 * sh[c]:10.0f}%" for c in PROGRAM_CLASSES))
    return "\n".join(out) + "\n"


def stage_notes(labelled: Mapping[str, Sequence[Mapping[str, Any]]], title: str) -> tuple[str, str]:
    """(text, markdown) notes: program shares and whether each stage moved the numbers."""
    moves = stage_moves(labelled)
    sentences = [verdict_sentence(a, b, d) for a, b, d in moves]
    text = f"Programs emitted ({title}; share of samples by code hash)\n" + program_table_text(labelled)
    md = f"### Programs emitted ({title})\n\nShare of samples by code hash:\n\n" + program_table_md(labelled)
    if sentences:
        text += "\nDid the stages move? (mean speedup, failures as 0, paired by task)\n"
        text += "".join(f"- {s}\n" for s in sentences)
        md += "\n**Did the stages move?** Mean speedup (failures as 0), paired by task:\n\n"
        md += "".join(f"- {s}\n" for s in sentences)
    return text, md
