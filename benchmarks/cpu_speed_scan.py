"""How fast is each CPU core this process may use, and does it stay so? A host check for timing.

A short GPU call is mostly host work (Python, the launches, the synchronisation), so its time
follows the speed of the core it runs on. On a virtual machine, cores can differ (a busy
hyper-thread sibling, a neighbour's load) and drift. This runs a fixed pure-Python loop in a
fresh process pinned to each allowed core in turn, ``--passes`` times over all cores, and prints
per core its siblings and the loop's median time in each pass.

    python benchmarks/cpu_speed_scan.py --passes 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def loop_us(repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        total = 0
        for i in range(20000):
            total += i * i % 7
        times.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(times)


def siblings(cpu: int) -> str:
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
            return f.read().strip()
    except OSError:
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--child", type=int, default=-1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child >= 0:
        os.sched_setaffinity(0, {args.child})
        print(f"{loop_us(args.repeats):.1f}")
        return
    cpus = sorted(os.sched_getaffinity(0))
    results: dict[int, list[float]] = {cpu: [] for cpu in cpus}
    for _ in range(args.passes):
        for cpu in cpus:
            out = subprocess.run([sys.executable, __file__, "--child", str(cpu), "--repeats", str(args.repeats)],
                                 capture_output=True, text=True, timeout=120, check=True)
            results[cpu].append(float(out.stdout.strip()))
    print(f"{'cpu':>4} {'siblings':>10}  loop us per pass")
    for cpu in cpus:
        print(f"{cpu:>4} {siblings(cpu):>10}  " + " ".join(f"{v:8.0f}" for v in results[cpu]))
    every = [v for vs in results.values() for v in vs]
    print(f"all: median {statistics.median(every):.0f} us, min {min(every):.0f}, max {max(every):.0f}")


if __name__ == "__main__":
    main()
