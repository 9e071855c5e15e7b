"""Does a kernel's time drift over seconds on this GPU, and what in the timing protocol makes it?

The farm's score is the median of 7 contiguous buckets of paired rounds, and its ±1% interval is a
t-interval over the bucket means. On an H200 the bucket means of fast candidates spread 3-10x more
than the same rounds shuffled would (docs/benchmarks.md), so the interval stays open for thousands
of rounds. This probe times a built-in task's reference and one of its variants in ONE process,
paired rounds in random order with the L2 flushed before each call (no judge, no workers, no
signals), under settings that add one part of the judge's protocol at a time:

* ``fixed``: the same input set for every call;
* ``rotate``: a pool of 32 input sets, a different one per round (as the arenas' slots);
* ``fresh``: one input set per side, refilled with new random values before every round;
* ``poison``: ``fresh``, plus the worker's free-memory poisoning before every call;
* ``ctx``: ``fresh``, plus a second process's CUDA context writing a buffer before every call
  (the judge's input write: a switch of the device between contexts);
* ``graph``: ``fresh``, each side's call replayed from a CUDA graph (no host launch gaps).

For each: medians by CUDA events, the score and interval as the judge computes them, the spread of
the bucket means against the same rounds shuffled (the drift ratio: 1 means no drift), and the
per-bucket medians of each side (which side drifts). Prints one table at the end.

    python scripts/drift_probe.py --task L1/8 --variant fast_any_gram_expansion.py --rounds 2000
    python scripts/drift_probe.py --task L2/6 --variant fast_any_tanh_relu.py --modes fixed,fresh --repeats 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalfarm.tasks.format import exec_module, instantiate_task  # noqa: E402
from evalfarm.tasks.suite import builtin_suite  # noqa: E402
from evalfarm.timing import bucket_stats  # noqa: E402

MODES = ("fixed", "rotate", "fresh", "poison", "ctx", "graph")
POOL = 32


def _other_context(conn: Any, device: str) -> None:
    """The second process: on each message, write 1 MiB in its own CUDA context and sync."""
    buf = torch.empty(1 << 18, device=device)
    torch.cuda.synchronize()
    while conn.recv() is not None:
        buf.normal_()
        torch.cuda.synchronize()
        conn.send(True)


def _refill(values: list[Any], gen: torch.Generator) -> None:
    for v in values:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            v.normal_(generator=gen)


class Side:
    """One side's model and its call under a mode (eager, or a CUDA graph over static inputs)."""

    def __init__(self, model: torch.nn.Module, inputs: list[Any], graph: bool) -> None:
        self.model, self.inputs, self.graph = model, inputs, None
        if graph:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    model(*inputs)
            torch.cuda.current_stream().wait_stream(s)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = model(*inputs)

    def __call__(self, inputs: list[Any]) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.model(*inputs)


def run_mode(mode: str, task: Any, cand_source: str, rounds: int, device: str, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    module = instantiate_task(task, "default")
    cand_module = exec_module(cand_source, f"drift_cand_{mode}_{seed}", "candidate.py")
    init = list(module.get_init_inputs())
    torch.manual_seed(seed)
    ref = module.Model(*init).to(device).eval()
    torch.manual_seed(seed)
    cand = cand_module.ModelNew(*init).to(device).eval()

    def draw() -> list[Any]:
        return [v.to(device) if isinstance(v, torch.Tensor) else v for v in module.get_inputs()]

    pool = [draw() for _ in range(POOL if mode == "rotate" else 1)]
    own = {"ref": draw(), "cand": draw()}
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    flush = torch.empty(max(2 * l2, 1 << 20) // 4, dtype=torch.float32, device=device)
    poisoner = None
    if mode == "poison":
        from evalfarm.judge.poison import FreeMemoryPoisoner
        poisoner = FreeMemoryPoisoner(torch)
    helper = conn = None
    if mode == "ctx":
        ctx = mp.get_context("spawn")
        conn, child = ctx.Pipe()
        helper = ctx.Process(target=_other_context, args=(child, device), daemon=True)
        helper.start()
    with torch.inference_mode():
        sides = {"ref": Side(ref, own["ref"], mode == "graph"), "cand": Side(cand, own["cand"], mode == "graph")}
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times: dict[str, list[float]] = {"ref": [], "cand": []}
        warm = 20
        t0 = time.monotonic()
        for r in range(rounds + warm):
            if mode in ("fresh", "poison", "ctx", "graph"):
                for v in own.values():
                    _refill(v, gen)
            order = ["ref", "cand"] if random.random() < 0.5 else ["cand", "ref"]
            for role in order:
                inputs = pool[r % len(pool)] if mode in ("fixed", "rotate") else own[role]
                if poisoner is not None:
                    poisoner()
                if conn is not None:
                    conn.send(1)
                    conn.recv()
                flush.zero_()
                torch.cuda.synchronize()
                start.record()
                sides[role](inputs)
                end.record()
                torch.cuda.synchronize()
                if r >= warm:
                    times[role].append(start.elapsed_time(end) * 1e3)
        wall = time.monotonic() - t0
    if conn is not None:
        conn.send(None)
        helper.join(10)
    ref_us, cand_us = np.array(times["ref"]), np.array(times["cand"])
    speedups = ref_us / cand_us
    stats = bucket_stats(speedups.tolist())
    shuffled = speedups.copy()
    np.random.default_rng(seed).shuffle(shuffled)
    sh = bucket_stats(shuffled.tolist())
    sd = statistics.stdev(stats.bucket_means) / stats.score
    sd_sh = statistics.stdev(sh.bucket_means) / sh.score
    return {
        "mode": mode, "rounds": rounds, "wall_s": round(wall, 2),
        "ref_us": float(np.median(ref_us)), "cand_us": float(np.median(cand_us)),
        "score": stats.score, "ci_pct": 100 * (stats.ci_high - stats.ci_low) / 2 / stats.score,
        "bucket_sd_pct": 100 * sd, "shuffled_sd_pct": 100 * sd_sh, "drift_ratio": sd / sd_sh if sd_sh else None,
        "ref_buckets_us": [float(np.median(b)) for b in np.array_split(ref_us, 7)],
        "cand_buckets_us": [float(np.median(b)) for b in np.array_split(cand_us, 7)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="L1/8", help="built-in task id")
    ap.add_argument("--variant", default="fast_any_gram_expansion.py",
                    help="a variant file of the task, or 'identical' for a copy of its reference")
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--repeats", type=int, default=1, help="runs per mode, the modes interleaved")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", help="write every run's row here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device")
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"unknown mode(s) {bad}; choose from {MODES}")
    suite = builtin_suite()
    task = suite.load(args.task)
    if args.variant == "identical":
        cand_source = task.source.replace("class Model(", "class ModelNew(", 1)
    else:
        found = [v for v in suite.variants(args.task) if v.path.name == args.variant]
        if not found:
            ap.error(f"{args.task} has no variant {args.variant!r}: "
                     f"{sorted(v.path.name for v in suite.variants(args.task))}")
        cand_source = found[0].load().source
    rows = []
    for k in range(args.repeats):
        for mode in modes:
            row = run_mode(mode, task, cand_source, args.rounds, args.device, seed=1000 + k)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\n{args.task} {args.variant} on {torch.cuda.get_device_name(args.device)}, {args.rounds} rounds per run")
    print("| mode | ref us | cand us | score | ±CI % | bucket sd % | shuffled sd % | drift ratio | cand buckets us (min-max) | ref buckets us (min-max) | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
    for r in rows:
        print(f"| {r['mode']} | {r['ref_us']:.1f} | {r['cand_us']:.1f} | {r['score']:.3f} | {r['ci_pct']:.2f} | "
              f"{r['bucket_sd_pct']:.2f} | {r['shuffled_sd_pct']:.2f} | {r['drift_ratio']:.1f} | "
              f"{min(r['cand_buckets_us']):.1f}-{max(r['cand_buckets_us']):.1f} | "
              f"{min(r['ref_buckets_us']):.1f}-{max(r['ref_buckets_us']):.1f} | {r['wall_s']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
