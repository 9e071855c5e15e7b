"""False-positive sweep: score every built-in variant that runs on the device once, with all guards on.

    python scripts/gpu_guard_sweep.py --device cuda --out sweep.json [--kinds fast,identical]

An honest variant must come back OK; the table shows each verdict, the speedup, whether the
physical-floor gate applied (and its floor), and the worker's isolation/poisoning report.
Exit status 1 when any honest variant is not OK.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalfarm.build import BuildPool  # noqa: E402
from evalfarm.config import ScoreConfig  # noqa: E402
from evalfarm.scoring import score  # noqa: E402
from evalfarm.tasks import builtin_suite  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--kinds", default="fast")
    p.add_argument("--inputs", type=int, default=50)
    p.add_argument("--budget", type=float, default=1.0)
    p.add_argument("--max-seconds", type=float, default=400)
    p.add_argument("--tasks", default="", help="comma list like L1/1,L2/3 (default: all)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    suite = builtin_suite()
    kinds = set(args.kinds.split(","))
    cfg = ScoreConfig(device=args.device, num_correctness_inputs=args.inputs, timing_budget_s=args.budget,
                      min_timed_rounds=20, reverify_above=0)
    rows = []
    start = time.monotonic()
    with BuildPool(max_workers=4) as pool:
        for entry in suite.entries:
            key = f"L{entry.level}/{entry.number}"
            if args.tasks and key not in args.tasks.split(","):
                continue
            task = suite.load(key)
            for v in suite.variants(key):
                if v.kind not in kinds or not v.runs_on(args.device):
                    continue
                if time.monotonic() - start > args.max_seconds:
                    print(f"time cap reached before {key} {v.path.name}", file=sys.stderr)
                    break
                r = score(task, v.load(), cfg, build_pool=pool)
                floor = r.evidence.physical_floor or {}
                row = {"task": key, "variant": v.path.name, "verdict": r.verdict.value, "speedup": r.speedup,
                       "detail": r.detail[:300], "floor_applied": floor.get("applied"),
                       "floor_us": floor.get("floor_us"), "cand_us": floor.get("cand_time_us_median"),
                       "isolation": r.evidence.isolation}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))
    bad = [r for r in rows if r["verdict"] != "OK"]
    print(f"{'task':<7}{'variant':<34}{'verdict':<15}{'speedup':>8}  floor")
    for r in rows:
        sp = "-" if r["speedup"] is None else f"{r['speedup']:.2f}"
        fl = "n/a" if not r["floor_applied"] else f"{r['floor_us']:.1f} us vs {r['cand_us']:.1f} us"
        print(f"{r['task']:<7}{r['variant'][:33]:<34}{r['verdict']:<15}{sp:>8}  {fl}")
    print(f"{len(rows) - len(bad)}/{len(rows)} honest variants OK")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
