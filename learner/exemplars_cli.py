"""`learner exemplars`: inspect and export the exemplar database.

    learner exemplars --db runs/x/exemplars.sqlite                  # per-task summary table
    learner exemplars --db ... --task level1/1_NewGELU --top 5      # best kernels of one task
    learner exemplars --db ... --task level1/1_NewGELU --json       # the same as a JSON list
    learner exemplars --db ... --export out/                        # write the best kernels as .py

Exported files are named ``<task_id with / replaced by _>__<rank>__<speedup>x.py`` (rank 1 is the
fastest). Exit status: 0 on success, 1 for an unknown task, 2 when the database cannot be opened.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

from learner.rl.exemplars import ExemplarDB, ExemplarDBError, SampleRecord

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TaskSummary:
    """One row of the summary table."""

    task: str
    samples: int
    ok: int
    best_speedup: float | None
    buckets: int


def build_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, type=Path, help="exemplar database (SQLite file)")
    p.add_argument("--task", default=None, help="show one task's best kernels")
    p.add_argument("--top", type=int, default=10, help="how many kernels per task (default 10)")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.add_argument("--export", type=Path, default=None, metavar="DIR",
                   help="write each best kernel to DIR/<task>__<rank>__<speedup>x.py")  # fmt: skip


def summarize(db: ExemplarDB) -> list[TaskSummary]:
    """Per-task counts, best speedup and number of speedup buckets."""
    out = []
    for task in db.tasks():
        counts = db.counts(task)
        best = db.best(task, k=1)
        out.append(
            TaskSummary(
                task=task,
                samples=sum(counts.values()),
                ok=counts.get("OK", 0),
                best_speedup=best[0].speedup if best else None,
                buckets=len(db.buckets(task)),
            )
        )
    return out


def export_filename(task_id: str, rank: int, speedup: float) -> str:
    return f"{task_id.replace('/', '_')}__{rank}__{speedup:.3f}x.py"


def export_best(
    db: ExemplarDB, out_dir: Path, task_id: str | None = None, k: int = 10
) -> list[Path]:
    """Write the top ``k`` kernels of one task (or of every task) under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for task in [task_id] if task_id is not None else db.tasks():
        for rank, rec in enumerate(db.best(task, k), start=1):
            if rec.speedup is None:  # best() returns OK rows with a speedup only
                continue
            path = out_dir / export_filename(task, rank, rec.speedup)
            path.write_text(rec.code.rstrip() + "\n", encoding="utf-8")
            paths.append(path)
    log.info("exported %d kernels to %s", len(paths), out_dir)
    return paths


def _fmt_speedup(s: float | None) -> str:
    return "-" if s is None else f"{s:.3f}x"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _record_json(rec: SampleRecord) -> dict[str, Any]:
    return dataclasses.asdict(rec)


def run(args: argparse.Namespace) -> int:
    db_path = Path(args.db)
    if not db_path.is_file():
        print(f"error: exemplar database {db_path} does not exist", file=sys.stderr)
        return 2
    if args.top < 0:
        print(f"error: --top must be >= 0, got {args.top}", file=sys.stderr)
        return 2
    try:
        db = ExemplarDB(db_path)
    except ExemplarDBError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with db:
        if args.task is not None and args.task not in db.tasks():
            print(f"error: no samples for task {args.task!r} in {db_path}", file=sys.stderr)
            return 1
        if args.export is not None:
            for path in export_best(db, args.export, args.task, args.top):
                print(path)
            return 0
        if args.task is not None:
            best = db.best(args.task, args.top)
            if args.json:
                print(json.dumps([_record_json(r) for r in best], indent=2))
            else:
                header = ["rank", "speedup", "sample_id", "step", "stage", "policy"]
                rows = [
                    [str(i), _fmt_speedup(r.speedup), r.sample_id, str(r.step), r.stage,
                     str(r.policy_version)]
                    for i, r in enumerate(best, start=1)
                ]  # fmt: skip
                print(_table(header, rows))
            return 0
        summary = summarize(db)
        if args.json:
            print(json.dumps([dataclasses.asdict(s) for s in summary], indent=2))
        else:
            header = ["task", "samples", "OK", "best", "buckets"]
            rows = [
                [s.task, str(s.samples), str(s.ok), _fmt_speedup(s.best_speedup), str(s.buckets)]
                for s in summary
            ]
            print(_table(header, rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="learner exemplars", description=__doc__.splitlines()[0])
    build_parser(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
