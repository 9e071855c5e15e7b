"""Sum the judges' cProfile files (EVALFARM_JUDGE_CPROFILE=DIR) and print where their time went.

    EVALFARM_JUDGE_CPROFILE=/tmp/jp python -m evalfarm score --task L1/3 --candidate ... --json
    python scripts/judge_profile_summary.py /tmp/jp [--top 30] [--sort tottime|cumulative]

Each judge writes judge-<pid>.prof for its evaluation; this adds them up (pstats) and prints the
top functions. Time in the judge's receives is its workers' time (their preparation and calls).
"""

from __future__ import annotations

import argparse
import io
import pstats
import sys
from pathlib import Path


def summary(files: list[Path], top: int, sort: str) -> str:
    out = io.StringIO()
    stats = pstats.Stats(str(files[0]), stream=out)
    for f in files[1:]:
        stats.add(str(f))
    stats.strip_dirs().sort_stats(sort).print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="the directory given as EVALFARM_JUDGE_CPROFILE")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--sort", choices=("tottime", "cumulative"), default="tottime")
    args = ap.parse_args(argv)
    files = sorted(args.dir.glob("judge-*.prof"))
    if not files:
        print(f"no judge-*.prof in {args.dir}", file=sys.stderr)
        return 2
    print(f"{len(files)} judge profile(s) from {args.dir}")
    print(summary(files, args.top, args.sort))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
