"""What a judge's first shape-only pass (MemoryGate.before_setup on a GPU) costs in a fresh
process, cold and after the standby warm-up (evalfarm.judge.memory_plan.warm_meta).

    python benchmarks/probes/judge_setup_probe.py --tasks L1/1,L1/3,L2/3 --warm      # warm first
    python benchmarks/probes/judge_setup_probe.py --tasks L1/1,L1/3,L2/3             # cold

Each task line: the seconds meta_footprint took. Run both in fresh processes to compare.
"""

from __future__ import annotations

import argparse
import time

from evalfarm.judge.inputs import InputSource
from evalfarm.judge.memory_plan import meta_footprint, warm_meta
from evalfarm.scoring import as_task
from evalfarm.tasks.format import instantiate_task
from evalfarm.tasks.suite import builtin_suite


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="L1/1,L1/3,L2/3")
    ap.add_argument("--warm", action="store_true", help="call warm_meta() first, as a standby judge does")
    args = ap.parse_args()
    t = time.perf_counter()
    if args.warm:
        warm_meta()
    print(f"warm-up {time.perf_counter() - t:.2f} s")
    for name in args.tasks.split(","):
        task = as_task(str(builtin_suite().find(name).path))
        module = instantiate_task(task, task.resolve_profile("auto", "cuda"))
        init_inputs = InputSource(module, "cpu").init_inputs()
        t = time.perf_counter()
        fp = meta_footprint(module, init_inputs)
        print(f"{name}: meta_footprint {time.perf_counter() - t:.2f} s ({'estimated' if fp else 'no estimate'})")


if __name__ == "__main__":
    main()
