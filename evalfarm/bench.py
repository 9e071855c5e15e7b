"""Farm benchmark: reward noise, GPU seconds per candidate, correctness and overhead costs.

    python -m evalfarm.bench --device cuda [--tasks L1/1,L1/2,...] [--repeats 5] [--out bench.json]

For each task it scores the task's fastest shipped variant ``--repeats`` times with the
default protocol (1000 correctness inputs, +/-1% CI target, 10 s timing budget) and reports:
the coefficient of variation of the (unrounded) score across re-scorings, the slot seconds
per scored candidate (judge set-up + load + correctness + timing), the seconds spent on the
1000-input correctness phase, and the per-candidate overhead (judge set-up + worker start
and load). The table is printed last; docs/benchmarks.md keeps the method and results.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from evalfarm.build import BuildPool
from evalfarm.config import ScoreConfig
from evalfarm.scoring import score
from evalfarm.tasks import builtin_suite

DEFAULT_TASKS = "L1/1,L1/2,L1/3,L1/6,L1/8,L2/1,L2/3,L2/4,L2/7,L3/1,L3/2,L3/3"


def _pick_variant(suite: Any, key: str, device: str) -> Any:
    variants = [v for v in suite.variants(key) if v.kind == "fast" and v.runs_on(device)]
    dev = "cuda" if device.startswith("cuda") else "cpu"
    preferred = [v for v in variants if v.devices == dev]
    return (preferred or variants or [None])[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--tasks", default=DEFAULT_TASKS)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--inputs", type=int, default=1000)
    p.add_argument("--budget", type=float, default=10.0)
    p.add_argument("--out", default=None)
    p.add_argument("--max-seconds", type=float, default=1e9, help="stop starting new tasks after this")
    args = p.parse_args(argv)
    cfg = ScoreConfig(device=args.device, num_correctness_inputs=args.inputs, timing_budget_s=args.budget)
    suite = builtin_suite()
    rows: list[dict[str, Any]] = []
    result = {"device": args.device, "device_name": _device_name(args.device), "config": cfg.to_dict(),
              "rows": rows}
    t_start = time.monotonic()
    with BuildPool(max_workers=2) as pool:
        for key in [k.strip() for k in args.tasks.split(",") if k.strip()]:
            if time.monotonic() - t_start > args.max_seconds:
                print(f"time cap reached; skipping {key} and later tasks", file=sys.stderr)
                break
            task = suite.load(key)
            variant = _pick_variant(suite, key, args.device)
            if variant is None:
                continue
            runs = []
            for i in range(args.repeats):
                r = score(task, variant.load(), cfg, build_pool=pool)
                ph = r.evidence.phases_s
                t = r.evidence.timing
                runs.append({
                    "verdict": r.verdict.value, "speedup": r.speedup,
                    "raw": t.raw_speedup if t else None, "rounds": t.rounds if t else 0,
                    "ci_half": ((t.ci_high - t.ci_low) / 2 / t.raw_speedup) if t and t.raw_speedup else None,
                    "ref_us": t.ref_time_us_median if t else None,
                    "slot_s": sum(ph.get(k, 0.0) for k in ("judge_setup", "load", "correctness", "timing")),
                    "correctness_s": ph.get("correctness"), "timing_s": ph.get("timing"),
                    "overhead_s": ph.get("judge_setup", 0.0) + ph.get("load", 0.0),
                    "build_s": ph.get("build"), "detail": r.detail[:200],
                })
                print(f"{key} {variant.path.name} run {i + 1}/{args.repeats}: {r.verdict.value} "
                      f"{r.speedup} ({runs[-1]['slot_s']:.1f} s)", file=sys.stderr, flush=True)
            raws = [x["raw"] for x in runs if x["raw"]]
            row = {
                "task": task.name, "variant": variant.path.name, "runs": runs,
                "ok": sum(x["verdict"] == "OK" for x in runs),
                "speedup_mean": statistics.mean(raws) if raws else None,
                "cv_pct": 100 * statistics.stdev(raws) / statistics.mean(raws) if len(raws) > 1 else None,
                "ref_us": statistics.median([x["ref_us"] for x in runs if x["ref_us"]] or [0.0]),
                "slot_s": statistics.mean(x["slot_s"] for x in runs),
                "correctness_s": statistics.mean(x["correctness_s"] or 0.0 for x in runs),
                "overhead_s": statistics.mean(x["overhead_s"] for x in runs),
                "rounds": statistics.mean(x["rounds"] for x in runs),
            }
            rows.append(row)
            _write(args.out, result)  # after every task, so a cut-off run keeps what it measured
    print(f"\nfarm benchmark on {result['device_name']} ({args.device}), {args.repeats} re-scorings per task")
    hdr = f"{'task':<28} {'ok':>3} {'ref us':>9} {'speedup':>8} {'CV %':>6} {'rounds':>7} {'slot s':>7} {'corr s':>7} {'ovh s':>6}"
    print(hdr)
    for row in rows:
        cv = f"{row['cv_pct']:.2f}" if row["cv_pct"] is not None else "-"
        sp = f"{row['speedup_mean']:.3f}" if row["speedup_mean"] else "-"
        print(f"{row['task'][:28]:<28} {row['ok']:>3} {row['ref_us']:>9.1f} {sp:>8} {cv:>6} {row['rounds']:>7.0f} "
              f"{row['slot_s']:>7.2f} {row['correctness_s']:>7.2f} {row['overhead_s']:>6.2f}")
    return 0


def _write(path: str | None, result: dict[str, Any]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        from evalfarm.devices import gpu_for

        g = gpu_for(device)
        return g.name if g else "unknown GPU"
    from evalfarm.devices import cpu_name

    return cpu_name()


if __name__ == "__main__":
    sys.exit(main())
