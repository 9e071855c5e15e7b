"""One line per candidate from daemon-benchmark JSON files (evalfarm.bench_daemon --out).

    python benchmarks/bench_daemon_rows.py OUT/after-1.json OUT/before-2.json

Prints, per file, each candidate's task, variant, verdict, speedup, evaluation seconds and its
main phases (correctness, timing, judge set-up and its setup_task part, input draws), then the
median evaluation seconds of the OK candidates.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PHASES = ("correctness", "timing", "judge_setup", "setup_task", "rounds_inputs", "rounds_exchange")


def rows(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    lines = [f"== {path.name}: {data.get('summary', {}).get('candidates_per_min', '?')} candidates/min"]
    head = f"{'task':6}{'variant':30}{'verdict':11}{'speedup':>8}{'eval s':>8}" + "".join(f"{p[:12]:>13}" for p in PHASES)
    lines.append(head + f"{'timed':>7}")
    ok_seconds = []
    for r in data["rows"]:
        p = r.get("phases_s") or {}
        seconds = r.get("seconds") or 0.0
        if r.get("verdict") == "OK":
            ok_seconds.append(seconds)
        lines.append(f"{r['task']:6}{r['variant'][:29]:30}{r['verdict']:11}{r.get('speedup') or 0:8.2f}{seconds:8.2f}"
                     + "".join(f"{p.get(k, 0.0):13.2f}" for k in PHASES) + f"{r.get('timed_rounds') or 0:7d}")
    if ok_seconds:
        lines.append(f"median evaluation s of {len(ok_seconds)} OK: {statistics.median(ok_seconds):.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    paths = [Path(a) for a in (argv if argv is not None else sys.argv[1:])]
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in paths:
        print("\n".join(rows(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
