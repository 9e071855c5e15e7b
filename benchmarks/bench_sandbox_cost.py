#!/usr/bin/env python
"""The sandbox's cost per candidate: the same evaluation under each worker sandbox setting.

Settings (``--settings``, default all three where bubblewrap is usable):
* ``bubblewrap``: EVALFARM_SANDBOX=bubblewrap (evalfarm.sandbox.bubblewrap);
* ``builtin``: EVALFARM_SANDBOX=builtin, the fallback (as root: own PID, mount and network
  namespaces, uid 65534; not root: what the host allows);
* ``off``: builtin with EVALFARM_WORKER_PIDNS=0, EVALFARM_WORKER_NETNS=0, EVALFARM_SANDBOX_UID=off.
The settings take turns (bubblewrap, builtin, off, bubblewrap, ...) so that drift on a shared
machine falls on all; each evaluation is fresh (new judge and workers). Prints medians of the
evaluation's wall time and of its phases, and what evidence.isolation said was in force.

    .venv/bin/python benchmarks/bench_sandbox_cost.py --task L1/1 --kind fast --repeats 5
    .venv/bin/python benchmarks/bench_sandbox_cost.py --device cuda --inputs 1000 --budget 10   # GPU host
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

SETTINGS = {
    "bubblewrap": {"EVALFARM_SANDBOX": "bubblewrap"},
    "builtin": {"EVALFARM_SANDBOX": "builtin"},
    "off": {"EVALFARM_SANDBOX": "builtin", "EVALFARM_WORKER_PIDNS": "0", "EVALFARM_WORKER_NETNS": "0",
            "EVALFARM_SANDBOX_UID": "off"},
}
KEYS = sorted({k for env in SETTINGS.values() for k in env})
PHASES = ("judge_setup", "load", "correctness", "timing", "total")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="L1/1")
    ap.add_argument("--kind", default="fast", choices=("fast", "wrong", "slow"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=5, help="evaluations per setting")
    ap.add_argument("--inputs", type=int, default=20)
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--settings", default="", help="comma-separated subset of " + ",".join(SETTINGS)
                    + " (default: all; bubblewrap only where it is usable)")
    args = ap.parse_args()
    if args.settings:
        names = [n.strip() for n in args.settings.split(",") if n.strip()]
        unknown = [n for n in names if n not in SETTINGS]
        if unknown:
            ap.error(f"unknown settings {unknown}; expected some of {list(SETTINGS)}")
    else:
        from evalfarm.sandbox import bubblewrap

        usable = bubblewrap.selected()[0] is not None if bubblewrap.mode() != "builtin" else False
        names = [n for n in SETTINGS if n != "bubblewrap" or usable]

    suite = builtin_suite()
    task = suite.load(args.task)
    kind = "cpu" if args.device == "cpu" else "cuda"
    variant = next(v for v in suite.variants(args.task) if v.kind == args.kind and v.runs_on(kind))
    cand = variant.load()
    cfg = ScoreConfig(device=args.device, num_correctness_inputs=args.inputs, timing_budget_s=args.budget,
                      size_profile="small" if args.device == "cpu" else "default")
    pool = scoring.default_build_pool()
    saved = {k: os.environ.get(k) for k in KEYS}
    walls: dict[str, list[float]] = {n: [] for n in names}
    phases: dict[str, dict[str, list[float]]] = {n: {} for n in names}
    isolation: dict[str, list[str]] = {}
    verdicts: dict[str, set[str]] = {n: set() for n in names}
    total = len(names) * args.repeats
    try:
        for i in range(total):
            setting = names[i % len(names)]
            for k in KEYS:
                os.environ.pop(k, None)
                if k in SETTINGS[setting]:
                    os.environ[k] = SETTINGS[setting][k]
                elif saved[k] is not None:
                    os.environ[k] = saved[k]
            t0 = time.perf_counter()
            res = scoring.score(task, cand, cfg, build_pool=pool)
            walls[setting].append(time.perf_counter() - t0)
            verdicts[setting].add(res.verdict.value)
            for name in PHASES:
                if name in res.evidence.phases_s:
                    phases[setting].setdefault(name, []).append(res.evidence.phases_s[name])
            isolation.setdefault(setting, res.evidence.isolation)
            print(f"{i + 1}/{total} {setting}: {walls[setting][-1]:.2f} s, {res.verdict.value}", flush=True)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v

    print(f"\ntask {args.task}, variant {variant.label}, device {args.device}, {args.inputs} inputs, "
          f"budget {args.budget} s, median of {args.repeats} per setting, taking turns; uid {os.geteuid()}")
    print(f"{'median seconds':<16}" + "".join(f"{n:>12}" for n in names))
    for name in ("wall", *PHASES):
        cols = [walls[n] if name == "wall" else phases[n].get(name, []) for n in names]
        if all(cols):
            print(f"{name:<16}" + "".join(f"{statistics.median(c):>12.3f}" for c in cols))
    print("verdicts: " + ", ".join(f"{n} {sorted(verdicts[n])}" for n in names))
    for setting, notes in isolation.items():
        print(f"isolation ({setting}): " + "; ".join(notes[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
