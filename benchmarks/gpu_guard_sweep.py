"""Score every built-in variant that runs on the device once, with all guards on; optionally also an
identical copy of each task's reference.

    python benchmarks/gpu_guard_sweep.py --device cuda --kinds fast,identical --out sweep.json
    python benchmarks/gpu_guard_sweep.py --root /path/to/other/checkout ...   # another version's farm

An honest variant must come back OK; an identical copy must score 1.00 within noise. The table
shows each verdict, the speedup with its 95% CI, the median reference and candidate call times,
and whether the physical-floor gate applied. ``--root`` imports ``evalfarm`` from another
checkout, so two versions of the farm can be compared on one machine in one session (the
built-in suite and its variants come from that checkout too). Exit status 1 when any is not OK.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--kinds", default="fast", help="comma list of variant kinds, plus 'identical'")
    p.add_argument("--inputs", type=int, default=50)
    p.add_argument("--budget", type=float, default=1.0)
    p.add_argument("--max-seconds", type=float, default=400)
    p.add_argument("--build-workers", type=int, default=8, help="parallel inline-extension builds, all up front")
    p.add_argument("--tasks", default="", help="comma list like L1/1,L2/3 (default: all)")
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                   help="the checkout whose evalfarm is used (default: this one)")
    p.add_argument("--label", default="", help="a name for this run in the JSON")
    p.add_argument("--size-profile", default="auto", help="the tasks' size profile (e.g. small: short kernels)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a ScoreConfig field for every evaluation, VALUE as JSON (e.g. correctness_block=false); repeatable")
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args()


def options(pairs: list[str]) -> dict[str, object]:
    """--option KEY=VALUE pairs as ScoreConfig changes (VALUE parsed as JSON, else kept as text)."""
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--option wants KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def identical_source(task_source: str) -> str:
    """The task's own reference, renamed to ModelNew: it must score 1.00."""
    return task_source.replace("class Model(", "class ModelNew(").replace("super(Model, self)", "super(ModelNew, self)")


def main() -> int:
    args = _args()
    sys.path.insert(0, str(args.root.resolve()))
    from evalfarm.build import BuildPool
    from evalfarm.config import ScoreConfig
    from evalfarm.scoring import as_candidate, score
    from evalfarm.tasks import builtin_suite

    suite = builtin_suite()
    kinds = set(args.kinds.split(","))
    cfg = ScoreConfig(device=args.device, size_profile=args.size_profile, num_correctness_inputs=args.inputs,
                      timing_budget_s=args.budget,
                      min_timed_rounds=20, reverify_above=0, **options(args.option))
    rows = []
    start = time.monotonic()
    work = []  # (task key, task, variant name, kind, candidate)
    for entry in suite.entries:
        key = f"L{entry.level}/{entry.number}"
        if args.tasks and key not in args.tasks.split(","):
            continue
        task = suite.load(key)
        work += [(key, task, v.path.name, v.kind, v.load()) for v in suite.variants(key)
                 if v.kind in kinds and v.runs_on(args.device)]
        if "identical" in kinds:
            work.append((key, task, "identical", "identical", as_candidate(identical_source(task.source))))
    with BuildPool(max_workers=args.build_workers) as pool:
        # Every inline-extension build at once, up front (a cold CUDA build takes a minute or
        # more): the scoring below then loads them from the cache instead of building one by one.
        try:
            from evalfarm.devices import build_arch

            arch = build_arch(args.device)
            builds = [pool.submit(cand.source, arch) for *_, cand in work]
            statuses = [b.result().status for b in builds]
            print(f"prebuilt {len(builds)} candidates in {time.monotonic() - start:.1f} s: "
                  + ", ".join(f"{st} {statuses.count(st)}" for st in sorted(set(statuses))), file=sys.stderr)
        except (ImportError, AttributeError, TypeError) as err:  # an older farm in --root: build while scoring
            print(f"no prebuild ({type(err).__name__}: {err})", file=sys.stderr)
        for key, task, name, kind, cand in work:
            if time.monotonic() - start > args.max_seconds:
                print(f"time cap reached before {key} {name}", file=sys.stderr)
                break
            t0 = time.monotonic()
            r = score(task, cand, cfg, build_pool=pool)
            floor = r.evidence.physical_floor or {}
            t = r.evidence.timing
            row = {"task": key, "variant": name, "kind": kind, "verdict": r.verdict.value, "speedup": r.speedup,
                   "raw": t.raw_speedup if t else None, "ci": [t.ci_low, t.ci_high] if t else None,
                   "ref_us": t.ref_time_us_median if t else None, "cand_us": t.cand_time_us_median if t else None,
                   # What the judge added to each candidate call (an older farm has no exchange charge).
                   "charge_us": max(getattr(t, "pre_call_charge_us", 0.0) or 0.0,
                                    getattr(t, "exchange_charge_us", 0.0) or 0.0) if t else None,
                   "exchange_excess_us": getattr(t, "exchange_excess_us", None) if t else None,
                   # How the correctness blocks went per worker (a diagnostic; an older farm has none).
                   "blocks": getattr(t, "blocks", None) if t else None,
                   "detail": r.detail[:300], "floor_applied": floor.get("applied"),
                   "guards": r.evidence.guards, "seconds": time.monotonic() - t0,
                   "phases": r.evidence.phases_s,
                   "isolation": r.evidence.isolation}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"label": args.label, "root": str(args.root), "options": args.option, "rows": rows}, indent=2))
    bad = [r for r in rows if r["verdict"] != "OK"]
    print(f"{'task':<7}{'variant':<34}{'verdict':<15}{'speedup':>8}{'raw':>8}{'ref us':>10}{'cand us':>10}"
          f"{'chg us':>8}{'xs us':>8}{'s':>6}")
    for r in rows:
        sp = "-" if r["speedup"] is None else f"{r['speedup']:.2f}"
        raw = "-" if r["raw"] is None else f"{r['raw']:.3f}"
        ref = "-" if r["ref_us"] is None else f"{r['ref_us']:.1f}"
        cu = "-" if r["cand_us"] is None else f"{r['cand_us']:.1f}"
        chg = "-" if r["charge_us"] is None else f"{r['charge_us']:.1f}"
        xs = "-" if r["exchange_excess_us"] is None else f"{r['exchange_excess_us']:.1f}"
        print(f"{r['task']:<7}{r['variant'][:33]:<34}{r['verdict']:<15}{sp:>8}{raw:>8}{ref:>10}{cu:>10}"
              f"{chg:>8}{xs:>8}{r['seconds']:>6.1f}")
    print(f"{args.label or args.root}: {len(rows) - len(bad)}/{len(rows)} honest candidates OK")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
