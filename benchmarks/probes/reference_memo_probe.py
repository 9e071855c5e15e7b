"""What keeping a window's reference outputs saves (evalfarm.judge.reference_memo): one task window
of W copies of a candidate, scored with the kept outputs off (EVALFARM_REFERENCE_MEMO_MB=0) and on
(the default budget), the two sides taking turns for R repetitions in this one process.

    python benchmarks/probes/reference_memo_probe.py --task L1/1 [--candidate FILE] [--window 4]
        [--reps 2] [--inputs 1000] [--device cpu]

Without --candidate, an identical copy of the task's reference. Prints one line per evaluation
and, last, a table: per side, the median correctness seconds of the window's first candidate and
of the later ones, and the rounds checked against kept outputs. Needs the strong sandbox
(bubblewrap) for the "on" side to keep anything; its evidence says why where it did not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from evalfarm import ScoreConfig
from evalfarm.build.pool import BuildPool
from evalfarm.judge.reference_memo import REFERENCE_MEMO_ENV
from evalfarm.judge.standby import WarmJudges
from evalfarm.judge.task_window import WindowSpec
from evalfarm.scoring import as_candidate, score
from evalfarm.tasks.suite import builtin_suite


def identical_copy(source: str) -> str:
    return source.replace("class Model(", "class ModelNew(")


def _median(values: list[float] | list[int]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def one_window(task, candidate, config: ScoreConfig, window: int, memo_setting: str) -> list[dict]:
    os.environ[REFERENCE_MEMO_ENV] = memo_setting  # read by each judge the window starts
    judges = WarmJudges({}, window=WindowSpec(window, 60.0))
    rows = []
    try:
        with tempfile.TemporaryDirectory() as cache, BuildPool(cache_dir=cache) as pool:
            for _ in range(window):
                r = score(task, candidate, config, pool, judges=judges)
                tw = r.evidence.task_window
                rows.append({"index": tw.get("index"), "verdict": r.verdict.value, "speedup": r.speedup,
                             "correctness_s": r.evidence.phases_s.get("correctness"),
                             "memo": tw.get("reference_memo", {})})
    finally:
        judges.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="L1/1")
    ap.add_argument("--candidate", default="")
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--inputs", type=int, default=1000)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    task = builtin_suite().load(args.task)
    candidate = as_candidate(args.candidate) if args.candidate else as_candidate(identical_copy(task.source))
    config = ScoreConfig(num_correctness_inputs=args.inputs, device=args.device)
    sides = {"off": "0", "on": ""}
    seen: dict[str, list[dict]] = {side: [] for side in sides}
    for rep in range(args.reps):
        for side, setting in sides.items():
            for row in one_window(task, candidate, config, args.window, setting):
                seen[side].append(row)
                print(f"rep {rep} memo {side}: {row}", flush=True)
    print(f"\n{args.task} on {args.device}, windows of {args.window}, {args.reps} per side, {args.inputs} inputs")
    print("| memo | correctness s, 1st candidate (median) | correctness s, later ones (median) | rounds reused, later ones (median) |")
    print("|---|---:|---:|---:|")
    for side, rows in seen.items():
        first = [r["correctness_s"] for r in rows if r["index"] == 1 and r["correctness_s"] is not None]
        later = [r["correctness_s"] for r in rows if r["index"] != 1 and r["correctness_s"] is not None]
        reused = [int(r["memo"].get("rounds_reused") or 0) for r in rows if r["index"] != 1]
        print(f"| {side} | {_median(first)} | {_median(later)} | {_median(reused)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
