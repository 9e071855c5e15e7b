"""Which rows of a batch's results file a run may reuse, and why the others are scored again.

Each row records what it was scored from: the candidate's source (``candidate_sha256``), the
task's content (``task_sha256``; None for a task name only a daemon resolves) and the scoring
options (``scoring``: every ScoreConfig field, the device, and the baseline). A later run
reuses a row only when all three are what it would score now; a row whose verdict is
INFRA_ERROR (the farm's fault, never the candidate's) is scored again too. A row that is not
reused is moved, before anything is scored, from the results file to ``<out>.superseded.jsonl``
beside it, so the results file keeps one row per sample and no earlier result is lost.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

INFRA_ERROR = "INFRA_ERROR"


@dataclasses.dataclass(frozen=True)
class Identity:
    """What a result depends on."""

    task_sha256: str | None
    candidate_sha256: str
    scoring: dict[str, Any]

    def fields(self) -> dict[str, Any]:
        """The row fields that record it."""
        return {"task_sha256": self.task_sha256, "candidate_sha256": self.candidate_sha256, "scoring": self.scoring}


def why_not_reused(row: dict[str, Any], now: Identity) -> str | None:
    """None when ``row`` can stand for a sample scored as ``now``; else the reason, in a few words."""
    if "scoring" not in row or "task_sha256" not in row:
        return "recorded without its task and options (an older evalfarm)"
    if row.get("candidate_sha256") != now.candidate_sha256:
        return "the candidate's source changed"
    if row.get("task_sha256") != now.task_sha256:
        return "the task's content changed"
    recorded = row.get("scoring") if isinstance(row.get("scoring"), dict) else {}
    changed = sorted(k for k in set(recorded) | set(now.scoring) if recorded.get(k) != now.scoring.get(k))
    if changed:
        return f"scoring options changed ({', '.join(changed)})"
    if row.get("verdict") == INFRA_ERROR:
        return "INFRA_ERROR (the farm's fault: scored again)"
    return None


@dataclasses.dataclass
class ResumePlan:
    reused: dict[str, dict[str, Any]]  # sample id -> its row, kept
    todo: list[Any]  # the items to score (BatchItem)
    why: Counter[str]  # reason -> how many rows were not reused for it
    superseded: list[dict[str, Any]]  # rows to move out of the results file
    other_samples: int  # rows of samples not in this input (left in the file as they are)

    def summary(self, total: int, out: str | Path) -> str:
        """The resume line: how many rows were reused and why others were not."""
        text = f"resuming from {out}: {len(self.reused)} of {total} samples reused"
        if self.why:
            text += "; scored again: " + ", ".join(f"{n} {why}" for why, n in self.why.most_common())
        if self.other_samples:
            text += f"; {self.other_samples} row(s) of samples not in this input left as they are"
        return text


def plan(items: Iterable[Any], rows: list[dict[str, Any]], identity: Callable[[Any], Identity]) -> ResumePlan:
    """Split ``items`` into rows to reuse and items to score, given the ``rows`` already in the file
    (the last row of a sample counts; earlier ones of the same sample are superseded)."""
    items = list(items)
    wanted = {it.sample_id: it for it in items}
    last: dict[str, dict[str, Any]] = {}
    superseded: list[dict[str, Any]] = []
    other = 0
    for row in rows:
        sid = row["sample_id"]
        if sid not in wanted:
            other += 1
            continue
        if sid in last:
            superseded.append(last[sid])
        last[sid] = row
    reused: dict[str, dict[str, Any]] = {}
    todo = []
    why: Counter[str] = Counter()
    for it in items:
        row = last.get(it.sample_id)
        if row is None:
            todo.append(it)
            continue
        reason = why_not_reused(row, identity(it))
        if reason is None:
            reused[it.sample_id] = row
        else:
            why[reason] += 1
            superseded.append(row)
            todo.append(it)
    return ResumePlan(reused, todo, why, superseded, other)


def superseded_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(f"{out.stem}.superseded.jsonl")


def move_superseded(out: str | Path, rows: list[dict[str, Any]], superseded: list[dict[str, Any]]) -> None:
    """Append ``superseded`` to ``<out>.superseded.jsonl`` (synced), then rewrite ``out`` without
    them (atomically): a crash in between leaves a row in both files, never in neither."""
    if not superseded:
        return
    gone = {id(r) for r in superseded}
    with superseded_path(out).open("a", encoding="utf-8") as f:
        for row in superseded:
            f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())
    out = Path(out)
    tmp = out.with_name(f".{out.name}.rewrite")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            if id(row) not in gone:
                f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out)
