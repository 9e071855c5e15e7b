"""Does a kernel's time drift over seconds on this GPU, and what in the timing protocol makes it?

The farm's score is the median of 7 contiguous buckets of paired rounds, and its ±1% interval is a
t-interval over the bucket means. On an H200 the bucket means of fast candidates spread 3-10x more
than the same rounds shuffled would (docs/benchmarks.md), so the interval stays open for thousands
of rounds. This probe times a built-in task's reference and one of its variants in ONE process,
paired rounds in random order with the L2 flushed before each call (no judge, no workers, no
signals), under settings that add one part of the judge's protocol at a time:

* ``fixed``: the same input set for every call;
* ``rotate``: a pool of 32 input sets, a different one per round (as the arenas' slots);
* ``fresh``: one input set per side, refilled from the task's ``get_inputs`` before every round;
* ``placed``: ``fresh``, but every round's inputs are new tensors and a spacer of random size
  (0-16 MiB) is held across each call, so a call's inputs, intermediates and outputs land at other
  addresses from round to round (in the other modes each side reuses the same blocks every call):
  a score that moves to 1 here, for an identical copy, says the gap was where memory was placed;
* ``poison``: ``fresh``, plus the worker's free-memory poisoning before every call;
* ``ctx``: ``fresh``, plus a second process's CUDA context writing a buffer before every call
  (the judge's input write: a switch of the device between contexts; CUDA only);
* ``graph``: ``fresh``, each side's call replayed from a CUDA graph (no host launch gaps; CUDA only).

On a GPU the calls are timed by CUDA events; on a CPU (``--device cpu``, for trying the probe
out, or for a CPU farm) by the host's clock, with the caches flushed by a 64 MiB write.

For each: medians by CUDA events, the score and interval as the judge computes them, the spread of
the bucket means against the same rounds shuffled (the drift ratio: 1 means no drift), and the
per-bucket medians of each side (which side drifts). Prints one table at the end.

    python benchmarks/probes/drift_probe.py --task L1/8 --variant fast_any_gram_expansion.py --rounds 2000
    python benchmarks/probes/drift_probe.py --task L2/6 --variant fast_any_tanh_relu.py --modes fixed,fresh --repeats 2
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evalfarm.tasks.format import exec_module, instantiate_task  # noqa: E402
from evalfarm.tasks.suite import builtin_suite  # noqa: E402
from evalfarm.timing import bucket_stats  # noqa: E402

MODES = ("fixed", "rotate", "fresh", "placed", "poison", "ctx", "graph")
POOL = 32


CUDA_ONLY = ("ctx", "graph")
CPU_FLUSH_BYTES = 64 << 20


def _other_context(conn: Any, device: str) -> None:
    """The second process: on each message, write 1 MiB in its own CUDA context and sync."""
    buf = torch.empty(1 << 18, device=device)
    torch.cuda.synchronize()
    while conn.recv() is not None:
        buf.normal_()
        torch.cuda.synchronize()
        conn.send(True)


def _refill(values: list[Any], fresh: list[Any]) -> None:
    """New values from the task's own ``get_inputs``, into the same tensors (addresses kept)."""
    for v, new in zip(values, fresh, strict=True):
        if isinstance(v, torch.Tensor):
            v.copy_(new)


class Side:
    """One side's model and its call under a mode (eager, or a CUDA graph over static inputs)."""

    def __init__(self, model: torch.nn.Module, inputs: list[Any], graph: bool) -> None:
        self.model, self.graph = model, None
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


def run_mode(mode: str, task: Any, cand_source: str, rounds: int, device: str, seed: int,
             profile: str = "auto") -> dict[str, Any]:
    torch.manual_seed(seed)
    module = instantiate_task(task, task.resolve_profile(profile, torch.device(device).type))
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
    cuda = torch.device(device).type == "cuda"
    flush_bytes = 2 * torch.cuda.get_device_properties(device).L2_cache_size if cuda else CPU_FLUSH_BYTES
    flush = torch.empty(max(flush_bytes, 1 << 20) // 4, dtype=torch.float32, device=device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    poisoner = None
    if mode == "poison":
        from evalfarm.judge.poison import FreeMemoryPoisoner, HeapPoisoner
        poisoner = FreeMemoryPoisoner(torch) if cuda else HeapPoisoner()
    helper = conn = None
    if mode == "ctx":
        ctx = mp.get_context("spawn")
        conn, child = ctx.Pipe()
        helper = ctx.Process(target=_other_context, args=(child, device), daemon=True)
        helper.start()
    with torch.inference_mode():
        sides = {"ref": Side(ref, own["ref"], mode == "graph"), "cand": Side(cand, own["cand"], mode == "graph")}
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times: dict[str, list[float]] = {"ref": [], "cand": []}
        warm = 20
        order_rng, place_rng = random.Random(seed), random.Random(seed + 1)
        t0 = time.monotonic()
        for r in range(rounds + warm):
            if mode in ("fresh", "poison", "ctx", "graph"):
                for v in own.values():
                    _refill(v, draw())
            if mode == "placed":
                own = {"ref": draw(), "cand": draw()}
            order = ["ref", "cand"] if order_rng.random() < 0.5 else ["cand", "ref"]
            for role in order:
                inputs = pool[r % len(pool)] if mode in ("fixed", "rotate") else own[role]
                if poisoner is not None:
                    poisoner()
                if conn is not None:
                    conn.send(1)
                    conn.recv()
                spacer = (torch.empty(place_rng.randrange(0, 16 << 20, 512), dtype=torch.uint8, device=device)
                          if mode == "placed" else None)
                flush.zero_()
                sync()
                if cuda:
                    start.record()
                    sides[role](inputs)
                    end.record()
                    sync()
                    us = start.elapsed_time(end) * 1e3
                else:
                    t = time.perf_counter_ns()
                    sides[role](inputs)
                    us = (time.perf_counter_ns() - t) / 1e3
                del spacer
                if r >= warm:
                    times[role].append(us)
        wall = time.monotonic() - t0
    if conn is not None:
        conn.send(None)
        helper.join(10)
    return {"mode": mode, "wall_s": round(wall, 2), **drift_summary(times["ref"], times["cand"], seed)}


def drift_summary(ref_us: list[float], cand_us: list[float], seed: int = 0, num_buckets: int = 7) -> dict[str, Any]:
    """Paired rounds' times as the judge scores them (evalfarm.timing.bucket_stats over the
    rounds in order), and the same rounds shuffled: ``drift_ratio`` is the spread of the bucket
    means over the shuffled rounds' (about 1 when the rounds are exchangeable, well above 1 when
    the times drift over the run); the per-bucket medians say which side moved."""
    ref, cand = np.asarray(ref_us, dtype=np.float64), np.asarray(cand_us, dtype=np.float64)
    speedups = ref / cand
    stats = bucket_stats(speedups.tolist(), num_buckets)
    shuffled = speedups.copy()
    np.random.default_rng(seed).shuffle(shuffled)
    sh = bucket_stats(shuffled.tolist(), num_buckets)
    sd = statistics.stdev(stats.bucket_means) / stats.score
    sd_sh = statistics.stdev(sh.bucket_means) / sh.score
    return {
        "rounds": int(speedups.size), "ref_us": float(np.median(ref)), "cand_us": float(np.median(cand)),
        "score": stats.score, "ci_pct": 100 * (stats.ci_high - stats.ci_low) / 2 / stats.score,
        "bucket_sd_pct": 100 * sd, "shuffled_sd_pct": 100 * sd_sh, "drift_ratio": sd / sd_sh if sd_sh else None,
        "ref_buckets_us": [float(np.median(b)) for b in np.array_split(ref, num_buckets)],
        "cand_buckets_us": [float(np.median(b)) for b in np.array_split(cand, num_buckets)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="L1/8", help="built-in task id")
    ap.add_argument("--variant", default="fast_any_gram_expansion.py",
                    help="a variant file of the task, or 'identical' for a copy of its reference")
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--modes", default="", help=f"comma-separated, of {', '.join(MODES)} "
                    f"(default: all; {', '.join(CUDA_ONLY)} on CUDA only)")
    ap.add_argument("--repeats", type=int, default=1, help="runs per mode, the modes interleaved")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size-profile", default="auto", help="the task's size profile ('auto': small on a CPU)")
    ap.add_argument("--json", help="write every run's row here")
    args = ap.parse_args()
    cuda = torch.device(args.device).type == "cuda"
    if cuda and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: no CUDA device here (--device cpu times on the host)")
    modes = [m for m in args.modes.split(",") if m] if args.modes else list(MODES if cuda else
                                                                            [m for m in MODES if m not in CUDA_ONLY])
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"unknown mode(s) {bad}; choose from {MODES}")
    if not cuda and set(modes) & set(CUDA_ONLY):
        ap.error(f"modes {sorted(set(modes) & set(CUDA_ONLY))} need a CUDA device")
    if args.rounds < 7:
        ap.error("--rounds must be at least 7 (one per bucket)")
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
            row = run_mode(mode, task, cand_source, args.rounds, args.device, seed=1000 + k,
                           profile=args.size_profile)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    where = torch.cuda.get_device_name(args.device) if cuda else f"the CPU ({torch.get_num_threads()} threads)"
    print(f"\n{args.task} {args.variant} on {where}, {args.rounds} rounds per run")
    print("| mode | ref us | cand us | score | ±CI % | bucket sd % | shuffled sd % | drift ratio | cand buckets us (min-max) | ref buckets us (min-max) | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
    for r in rows:
        ratio = "-" if r["drift_ratio"] is None else f"{r['drift_ratio']:.1f}"
        print(f"| {r['mode']} | {r['ref_us']:.1f} | {r['cand_us']:.1f} | {r['score']:.3f} | {r['ci_pct']:.2f} | "
              f"{r['bucket_sd_pct']:.2f} | {r['shuffled_sd_pct']:.2f} | {ratio} | "
              f"{min(r['cand_buckets_us']):.1f}-{max(r['cand_buckets_us']):.1f} | "
              f"{min(r['ref_buckets_us']):.1f}-{max(r['ref_buckets_us']):.1f} | {r['wall_s']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
