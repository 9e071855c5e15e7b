#!/usr/bin/env python
"""The sandbox's cost per candidate: the same evaluation with the worker sandbox on and off.

"on" is the default (as root: own PID, mount and network namespaces, uid 65534; not root: what
the host allows); "off" sets EVALFARM_WORKER_PIDNS=0, EVALFARM_WORKER_NETNS=0 and
EVALFARM_SANDBOX_UID=off. The settings alternate (on, off, on, off, ...) so that drift on a shared
machine falls on both; each evaluation is fresh (new judge and workers). Prints medians of the
evaluation's wall time and of its phases, and what evidence.isolation said was in force.

    .venv/bin/python scripts/bench_sandbox_cost.py --task L1/1 --kind fast --repeats 5
    .venv/bin/python scripts/bench_sandbox_cost.py --device cuda --inputs 1000 --budget 10   # GPU host
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalfarm import scoring  # noqa: E402
from evalfarm.config import ScoreConfig  # noqa: E402
from evalfarm.tasks import builtin_suite  # noqa: E402

OFF = {"EVALFARM_WORKER_PIDNS": "0", "EVALFARM_WORKER_NETNS": "0", "EVALFARM_SANDBOX_UID": "off"}
PHASES = ("judge_setup", "load", "correctness", "timing", "total")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="L1/1")
    ap.add_argument("--kind", default="fast", choices=("fast", "wrong", "slow"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=5, help="evaluations per setting")
    ap.add_argument("--inputs", type=int, default=20)
    ap.add_argument("--budget", type=float, default=0.5)
    args = ap.parse_args()

    suite = builtin_suite()
    task = suite.load(args.task)
    kind = "cpu" if args.device == "cpu" else "cuda"
    variant = next(v for v in suite.variants(args.task) if v.kind == args.kind and v.runs_on(kind))
    cand = variant.load()
    cfg = ScoreConfig(device=args.device, num_correctness_inputs=args.inputs, timing_budget_s=args.budget,
                      size_profile="small" if args.device == "cpu" else "default")
    pool = scoring.default_build_pool()
    saved = {k: os.environ.get(k) for k in OFF}
    walls: dict[str, list[float]] = {"on": [], "off": []}
    phases: dict[str, dict[str, list[float]]] = {"on": {}, "off": {}}
    isolation: dict[str, list[str]] = {}
    verdicts: dict[str, set[str]] = {"on": set(), "off": set()}
    try:
        for i in range(2 * args.repeats):
            setting = "on" if i % 2 == 0 else "off"
            for k, v in OFF.items():
                if setting == "off":
                    os.environ[k] = v
                else:
                    os.environ.pop(k, None)
                    if saved[k] is not None:
                        os.environ[k] = saved[k]
            t0 = time.perf_counter()
            res = scoring.score(task, cand, cfg, build_pool=pool)
            walls[setting].append(time.perf_counter() - t0)
            verdicts[setting].add(res.verdict.value)
            for name in PHASES:
                if name in res.evidence.phases_s:
                    phases[setting].setdefault(name, []).append(res.evidence.phases_s[name])
            isolation.setdefault(setting, res.evidence.isolation)
            print(f"{i + 1}/{2 * args.repeats} sandbox {setting}: {walls[setting][-1]:.2f} s, {res.verdict.value}",
                  flush=True)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v

    print(f"\ntask {args.task}, variant {variant.label}, device {args.device}, {args.inputs} inputs, "
          f"budget {args.budget} s, median of {args.repeats} per setting, alternating; uid {os.geteuid()}")
    print(f"{'median seconds':<16} {'sandbox on':>11} {'off':>8} {'on - off':>9}")
    rows = [("wall", walls["on"], walls["off"])] + [
        (name, phases["on"].get(name, []), phases["off"].get(name, [])) for name in PHASES]
    for name, on, off in rows:
        if on and off:
            a, b = statistics.median(on), statistics.median(off)
            print(f"{name:<16} {a:>11.3f} {b:>8.3f} {a - b:>+9.3f}")
    print(f"verdicts: on {sorted(verdicts['on'])}, off {sorted(verdicts['off'])}")
    for setting, notes in isolation.items():
        print(f"isolation ({setting}): " + "; ".join(notes[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
