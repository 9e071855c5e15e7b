"""Finished `learner train` runs side by side: their RL steps' seconds by phase, and whether their
exemplar databases hold the same samples.

    python -m learner.bench.run_steps two=runs/p2 one=runs/p1

Each run is NAME=WORKDIR. The table gives, per run, the RL steps' median wall time (`step_s`: since
the previous step ended) and the medians of its parts as `metrics.jsonl` records them: sampling
(`generate_s`), waiting on the farm (`farm_wait_s`), reference log-probs (`reference_s`) and the
update (`update_s`), with the step count and the first step apart (it compiles). With several
runs, each later run's `exemplars.sqlite` is compared with the first run's, row by row on the
columns that do not depend on when or where a run ran (sample id, task, code, verdict, speedup,
reward, stage): equal rows, rows only in one, and rows whose values differ.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PHASES = ("step_s", "generate_s", "farm_wait_s", "reference_s", "update_s")
COMPARED = ("sample_id", "task_id", "code", "verdict", "speedup", "reward", "stage")


@dataclass(frozen=True)
class RunSteps:
    """One run's RL steps: the first (compiles) and the median of the others, per phase."""

    name: str
    steps: int
    first: dict[str, float]
    median: dict[str, float]


@dataclass(frozen=True)
class RowComparison:
    """How one run's exemplar database compares with a reference run's; `differences`: for the
    first few rows that differ, the sample id and the columns whose values differ."""

    equal: int
    only_here: int
    only_there: int
    different: int
    differences: tuple[tuple[str, tuple[str, ...]], ...] = ()


def rl_steps(name: str, workdir: Path) -> RunSteps:
    """The RL lines of `workdir`/metrics.jsonl (a missing phase counts as absent, not 0)."""
    path = workdir / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics (did `learner train` run with this workdir?)")
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rl = [m for m in lines if m.get("stage") == "rl"]
    if not rl:
        return RunSteps(name, 0, {}, {})
    rest = rl[1:] or rl

    def med(rows: list[dict[str, Any]]) -> dict[str, float]:
        return {k: statistics.median(float(m[k]) for m in rows) for k in PHASES if all(k in m for m in rows)}

    return RunSteps(name, len(rl), med(rl[:1]), med(rest))


def database_rows(workdir: Path) -> dict[str, tuple]:
    """`exemplars.sqlite`'s samples, by sample id, on the `COMPARED` columns."""
    path = workdir / "exemplars.sqlite"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no exemplar database")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute(f"SELECT {', '.join(COMPARED)} FROM samples").fetchall()  # noqa: S608 - fixed columns
    finally:
        db.close()
    return {str(r[0]): tuple(r) for r in rows}


def compare_rows(here: dict[str, tuple], there: dict[str, tuple], show: int = 5) -> RowComparison:
    both = sorted(here.keys() & there.keys())
    differing = [k for k in both if here[k] != there[k]]
    differences = tuple((k, tuple(c for c, a, b in zip(COMPARED, here[k], there[k], strict=True) if a != b))
                        for k in differing[:show])
    return RowComparison(equal=len(both) - len(differing), only_here=len(here.keys() - there.keys()),
                         only_there=len(there.keys() - here.keys()), different=len(differing),
                         differences=differences)


def table(runs: Sequence[RunSteps]) -> str:
    def cell(r: RunSteps, k: str) -> str:
        if k not in r.median:
            return "-"
        return f"{r.median[k]:.2f}" + (f" (first {r.first[k]:.2f})" if r.steps > 1 and k in r.first else "")

    lines = ["| run | RL steps | " + " | ".join(PHASES) + " |", "|---|---|" + "---|" * len(PHASES)]
    lines += [f"| {r.name} | {r.steps} | " + " | ".join(cell(r, k) for k in PHASES) + " |" for r in runs]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m learner.bench.run_steps", description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", metavar="NAME=WORKDIR")
    args = p.parse_args(argv)
    named = []
    for spec in args.runs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            p.error(f"{spec!r}: expected NAME=WORKDIR")
        named.append((name, Path(path)))
    try:
        print("RL steps, median seconds (the first step apart: it compiles)\n")
        print(table([rl_steps(n, w) for n, w in named]))
        if len(named) > 1:
            ref_name, ref_dir = named[0]
            ref = database_rows(ref_dir)
            print(f"\nexemplar databases against {ref_name} ({len(ref)} samples; columns {', '.join(COMPARED)})")
            for name, workdir in named[1:]:
                c = compare_rows(database_rows(workdir), ref)
                print(f"  {name}: {c.equal} equal, {c.different} different, {c.only_here} only in {name}, "
                      f"{c.only_there} only in {ref_name}")
                for sample_id, columns in c.differences:
                    print(f"    {sample_id}: {', '.join(columns)} differ")
    except (FileNotFoundError, sqlite3.Error, json.JSONDecodeError) as err:
        raise SystemExit(f"learner.bench.run_steps: {err}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
