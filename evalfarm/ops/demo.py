"""End-to-end demo: score built-in tasks' shipped variants through the real farm pipeline.

    python -m evalfarm.ops.demo [--device cpu|cuda] [--tasks L1/2,L2/6,L3/1] [--inputs 200]

For each task it scores one faster variant and one subtly wrong variant (build, isolated
judge, correctness on fresh secret-seeded inputs, paired timing) and prints a table.
Expected: the fast variants are OK with speedup > 1, the wrong ones INCORRECT.
"""

from __future__ import annotations

import argparse
import sys
import time

from evalfarm.config import ScoreConfig
from evalfarm.scoring import score
from evalfarm.tasks import builtin_suite

DEFAULT_TASKS = "L1/2,L2/6,L3/1"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--tasks", default=DEFAULT_TASKS)
    p.add_argument("--inputs", type=int, default=200, help="correctness inputs per candidate")
    p.add_argument("--budget", type=float, default=3.0, help="timing budget per candidate (s)")
    args = p.parse_args(argv)
    cfg = ScoreConfig(device=args.device, num_correctness_inputs=args.inputs, timing_budget_s=args.budget)
    suite = builtin_suite()
    rows = []
    for key in args.tasks.split(","):
        task = suite.load(key.strip())
        variants = [v for v in suite.variants(key.strip()) if v.runs_on(args.device)]
        picked = [next((v for v in variants if v.kind == k), None) for k in ("fast", "wrong")]
        for v in picked:
            if v is None:
                continue
            t0 = time.monotonic()
            print(f"scoring {task.name} / {v.path.name} ...", file=sys.stderr, flush=True)
            r = score(task, v.load(), cfg)
            rows.append((task.name, v.path.name, r.verdict.value,
                         f"{r.speedup:.2f}" if r.speedup is not None else "-",
                         f"{time.monotonic() - t0:.1f}", (r.detail.splitlines() or [""])[0][:60]))
    header = ("task", "candidate", "verdict", "speedup", "seconds", "detail")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    for row in (header, *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False)))
    fast_ok = all(r[2] == "OK" for r in rows if r[1].startswith("fast"))
    wrong_caught = all(r[2] != "OK" for r in rows if r[1].startswith("wrong"))
    print(f"\nfast variants OK: {fast_ok}; wrong variants caught: {wrong_caught}")
    return 0 if fast_ok and wrong_caught else 1


if __name__ == "__main__":
    sys.exit(main())
