"""Time the built-in suite: the reference and every runnable 'fast' variant of each task.

    python benchmarks/suite_timing.py --device cpu --profile small
    python benchmarks/suite_timing.py --device cuda --profile default --tasks L1/1 L2/3

Each timing is the median of --iters calls after --warmup calls (with torch.cuda.synchronize()
around each call on a GPU), on one fixed input; the reference and the variants of a task are
called in interleaved rounds so that drifting machine load affects them alike. Every fast variant is also checked with the strict
comparison on that input; a variant that fails it, or fails to build, is reported and not timed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalfarm.compare import compare_outputs  # noqa: E402
from evalfarm.tasks import builtin_suite, instantiate_task  # noqa: E402
from evalfarm.tasks.format import exec_module  # noqa: E402


def time_calls(fns, inputs, device: str, warmup: int, iters: int) -> list[float]:
    """Median milliseconds of fn(*inputs) for each fn. The calls are interleaved round by round
    (ref, variant 1, variant 2, ref, ...) so a change in machine load hits all of them alike."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times: list[list[float]] = [[] for _ in fns]
    with torch.no_grad():
        for fn in fns:
            for _ in range(warmup):
                fn(*inputs)
        sync()
        for _ in range(iters):
            for fn, ts in zip(fns, times, strict=True):
                sync()
                start = time.perf_counter()
                fn(*inputs)
                sync()
                ts.append((time.perf_counter() - start) * 1e3)
    return [statistics.median(ts) for ts in times]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--profile", default=None, help="size profile (default: small on cpu, default on cuda)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", nargs="*", help="task ids or names (default: all)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    profile = args.profile or ("small" if args.device == "cpu" else "default")
    device = torch.device(args.device)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    suite = builtin_suite()
    keys = args.tasks or [e.task_id for e in suite.entries]
    rows, notes = [], []
    for key in keys:
        entry = suite.find(key)
        task = suite.load(key)
        module = instantiate_task(task, profile)
        init = module.get_init_inputs()
        with device:
            torch.manual_seed(args.seed)
            inputs = module.get_inputs()
            torch.manual_seed(args.seed)
            ref_model = module.Model(*init)
        with torch.no_grad():
            ref_out = ref_model(*inputs)
        runnable = []
        for variant in suite.variants(key):
            if variant.kind != "fast" or not variant.runs_on(args.device):
                continue
            name = f"{variant.devices}_{variant.label}"
            try:
                cand = variant.load()
                cmod = exec_module(cand.source, f"timing_{cand.sha256[:16]}", str(variant.path))
                with device:
                    torch.manual_seed(args.seed)
                    model = cmod.ModelNew(*init)
                with torch.no_grad():
                    cmp = compare_outputs(model(*inputs), ref_out, "strict")
            except Exception as err:  # noqa: BLE001 - report and go on with the others
                notes.append(f"{entry.task_id} {name}: failed to run: {type(err).__name__}: {err}")
                continue
            if not cmp.ok:
                notes.append(f"{entry.task_id} {name}: INCORRECT: {cmp.reason}")
                continue
            runnable.append((name, model))
        ref_ms, *fast_ms = time_calls(
            [ref_model] + [m for _, m in runnable], inputs, args.device, args.warmup, args.iters
        )
        best = None
        for (name, _), ms in zip(runnable, fast_ms, strict=True):
            notes.append(f"{entry.task_id} {name}: {ms:.3f} ms, speedup {ref_ms / ms:.2f}x")
            if best is None or ms < best[1]:
                best = (name, ms)
        rows.append((entry.task_id, entry.name, ref_ms, best))
        print(f"# {entry.task_id} {entry.name}: done", file=sys.stderr, flush=True)

    header = ("task", "name", "ref ms", "best fast variant", "fast ms", "speedup")
    lines = []
    for task_id, name, ref_ms, best in rows:
        if best is None:
            lines.append((task_id, name, f"{ref_ms:.3f}", "-", "-", "-"))
        else:
            lines.append((task_id, name, f"{ref_ms:.3f}", best[0], f"{best[1]:.3f}", f"{ref_ms / best[1]:.2f}x"))
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" for _ in header) + "|")
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(str(r[i])) for r in [header, *lines]) for i in range(len(header))]
        for line in [header, *lines]:
            print("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)))
    print(f"\ndevice={args.device} profile={profile} iters={args.iters} warmup={args.warmup} "
          f"threads={torch.get_num_threads()} torch={torch.__version__}")
    print("\nall fast variants:")
    for note in notes:
        print("  " + note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
