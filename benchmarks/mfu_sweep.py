"""Which training-step settings reach the MFU target: the learner-at-scale training measurement
(`learner.bench.throughput --suite h100`: a random Qwen2.5-1.5B shape, batch 16 x 4096 tokens) under
variants of micro-batch size, rematerialisation and loss chunk, each in its own process.

    python benchmarks/mfu_sweep.py --out $OUT/mfu_sweep.jsonl                 # GPU host, ~1 min a variant
    python benchmarks/mfu_sweep.py --suite tiny --variants base,mb2x           # CPU smoke test

Prints a Markdown table (step seconds, tokens/s, MFU, peak GB, micro-batches) and appends one
JSON line per variant to --out; a variant that fails (out of memory, say) is a row with its error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Overrides of the suite's `train` settings (learner.bench.throughput.SUITES[suite]["train"]). "mb2x"/"mb4x":
# micro-batches twice / four times as large (fewer of them per step).
VARIANTS: dict[str, dict[str, Any]] = {
    "base": {},
    "mb2x": dict(micro_batch_scale=2),
    "mb4x": dict(micro_batch_scale=4),
    "remat_dots": dict(remat_policy="dots"),
    "remat_none": dict(remat=False),
    "remat_none_mb2x": dict(remat=False, micro_batch_scale=2),
    "chunk2048": dict(chunk=2048),
    "chunk4096": dict(chunk=4096),
    "remat_none_chunk4096": dict(remat=False, chunk=4096),
}


def run_one(suite: str, name: str) -> dict[str, Any]:
    """One variant in this process: `learner.bench.throughput.bench_train` with the suite's sizes."""
    from learner.bench.throughput import SUITES, _suite_model, bench_train

    s, v = SUITES[suite], VARIANTS[name]
    tr = dict(s["train"])
    cfg = _suite_model(s["model"]).replace(remat_policy=v.get("remat_policy", tr["remat_policy"]),
                                           remat=v.get("remat", True))
    mbt = tr["micro_batch_tokens"] * v.get("micro_batch_scale", 1)
    res = bench_train(cfg, batch=tr["batch"], seq=tr["seq"], steps=tr["steps"], warmup=2,
                      chunk=v.get("chunk", tr["chunk"]), peak_flops=s["peak_flops"], micro_batch_tokens=mbt)
    return dict(variant=name, suite=suite, micro_batch_tokens=mbt, chunk=v.get("chunk", tr["chunk"]), **res)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| variant | remat | micro-batches (tokens) | loss chunk | step s | tok/s | MFU | peak GB | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['variant']} | - | - | - | - | - | - | - | {r['error'][:120]} |")
            continue
        remat = r["remat_policy"] if r["remat"] else "none"
        peak = f"{r['peak_mem_gb']:.1f}" if r.get("peak_mem_gb") is not None else "-"
        lines.append(f"| {r['variant']} | {remat} | {r['micro_batches']} ({r['micro_batch_tokens']}) | {r['chunk']} | "
                     f"{r['step_time_s']:.3f} | {r['tokens_per_s']:.0f} | {r['mfu']:.1%} | {peak} | "
                     f"compile {r['compile_s']:.0f} s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--suite", default="h100", help="learner.bench.throughput suite: h100 (GPU) or tiny (CPU)")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    p.add_argument("--timeout", type=float, default=300, help="seconds per variant")
    p.add_argument("--out", type=Path, default=None, help="append one JSON line per variant here")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one variant, print JSON
    args = p.parse_args(argv)
    if args.one:
        print("RESULT " + json.dumps(run_one(args.suite, args.one)), flush=True)
        return 0
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    rows: list[dict[str, Any]] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                          os.environ.get("PYTHONPATH", "")])}
    for i, name in enumerate(names, 1):
        t0 = time.perf_counter()
        print(f"[{i}/{len(names)}] {name} ...", file=sys.stderr, flush=True)
        try:
            proc = subprocess.run([sys.executable, __file__, "--suite", args.suite, "--one", name],
                                  capture_output=True, text=True, timeout=args.timeout, env=env)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            row = json.loads(line[len("RESULT "):]) if line else {
                "variant": name, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
        except subprocess.TimeoutExpired:
            row = {"variant": name, "error": f"timed out after {args.timeout:.0f} s"}
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    print(table(rows), flush=True)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
