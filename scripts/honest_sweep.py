"""Score the honest corpus (tests/honest/kernels) through the farm and report false positives.

    python scripts/honest_sweep.py --device cuda|cpu [--static on|off|both] [--out sweep.json]

Prints one row per kernel (file, task, style, verdict, speedup, claim met) and, per static
mode, a final line ``honest corpus: N/M OK (false positives: K)``. Exits 1 when any kernel
is not OK.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalfarm.build import BuildPool  # noqa: E402
from evalfarm.config import ScoreConfig  # noqa: E402
from evalfarm.devices import build_arch  # noqa: E402
from evalfarm.judge import interpreter  # noqa: E402
from evalfarm.scoring import as_candidate, score  # noqa: E402
from evalfarm.verdict import Verdict  # noqa: E402
from tests.honest.check import all_headers  # noqa: E402


def _sweep(headers, cfg: ScoreConfig, pool: BuildPool, static: str, keep) -> list[dict]:
    import evalfarm.scoring as scoring

    original = scoring.check_candidate_source
    if static == "off":
        scoring.check_candidate_source = lambda *a, **k: []
    rows = []
    try:
        for h in headers:
            r = score(h.task, as_candidate(str(h.path)), cfg, build_pool=pool)
            row = {
                "file": h.path.name, "task": h.task, "style": ",".join(h.styles), "device": h.device,
                "static": static, "verdict": r.verdict.value, "speedup": r.speedup, "claim": h.speedup,
                "claim_met": r.verdict is Verdict.OK and h.claim_met(r.speedup),
                "detail": (r.detail or "")[:1500],
                # What the judge charged the candidate's calls (pre-call flush, exchange), in us, and
                # the exchange excess it measured (charged where cfg.exchange_charged: on a GPU by default).
                "charges_us": ([r.evidence.timing.pre_call_charge_us, r.evidence.timing.exchange_charge_us]
                               if r.evidence.timing else None),
                "exchange_excess_us": r.evidence.timing.exchange_excess_us if r.evidence.timing else None,
            }
            rows.append(row)
            keep(row)
            sp = f"{r.speedup:.2f}" if r.speedup is not None else "-"
            charged = f" charged {max(row['charges_us']):.0f} us" if row["charges_us"] and max(row["charges_us"]) else ""
            if row["exchange_excess_us"]:
                charged += f" exchange excess {row['exchange_excess_us']:.0f} us"
            print(f"{h.path.name:44s} {h.task:6s} {row['style'][:40]:40s} {row['verdict']:16s} {sp:>7s} "
                  f"{h.speedup:>6s} {'met' if row['claim_met'] else 'NOT MET'}{charged}", flush=True)
            if r.verdict is not Verdict.OK:
                print("    " + row["detail"].strip().splitlines()[0][:300] if row["detail"].strip() else "", flush=True)
    finally:
        scoring.check_candidate_source = original
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cpu, cuda or cuda:N")
    ap.add_argument("--static", choices=("on", "off", "both"), default="both")
    ap.add_argument("--out", type=Path, help="write all rows as JSON here (rewritten after every kernel)")
    ap.add_argument("--cache-dir", default=os.environ.get("EVALFARM_CACHE_DIR"),
                    help="build cache to reuse across sweeps ($EVALFARM_CACHE_DIR; default: a fresh temporary one)")
    ap.add_argument("--budget", type=float, default=3.0, help="timing budget per kernel (s)")
    ap.add_argument("--inputs", type=int, default=100, help="correctness inputs per kernel")
    ap.add_argument("--only", default="", help="keep the files whose names contain one of these comma-separated substrings")
    ap.add_argument("--build-workers", type=int, default=2, help="parallel load_inline builds")
    ap.add_argument("--warm-call", choices=("auto", "on", "off"), default="auto",
                    help="ScoreConfig.warm_call (auto: on a CPU only); off on a CPU sends every timed call's "
                         "round with its go, as on a GPU (the worker prepared ahead)")
    args = ap.parse_args(argv)
    try:
        interpreter.require()  # every kernel would fail alike in judges that cannot import torch
    except interpreter.JudgeInterpreterError as err:
        print(f"{Path(__file__).name}: {err}", file=sys.stderr)
        return 2

    dev_kind = "cpu" if args.device == "cpu" else "cuda"
    headers = [h for h in all_headers() if h.runs_on(dev_kind) and any(s in h.path.name for s in args.only.split(","))]
    cfg = ScoreConfig(device=args.device, num_correctness_inputs=args.inputs, timing_budget_s=args.budget,
                      min_timed_rounds=21, reverify_above=0,
                      warm_call={"auto": None, "on": True, "off": False}[args.warm_call])
    modes = ("on", "off") if args.static == "both" else (args.static,)
    all_rows: list[dict] = []
    summaries = []

    def keep(row: dict) -> None:
        """Every row as soon as it is measured: a sweep cut short by a time limit keeps what it did."""
        all_rows.append(row)
        if args.out:
            args.out.write_text(json.dumps(all_rows, indent=1))

    with tempfile.TemporaryDirectory(prefix="honest-sweep-") as tmp_cache:
        pool = BuildPool(max_workers=args.build_workers, cache_dir=args.cache_dir or tmp_cache)
        try:
            # Every load_inline build at once, up front: the sweep then scores from the cache.
            arch = build_arch(args.device)
            builds = [pool.submit(h.path.read_text(), arch) for h in headers]
            failed = [h.path.name for h, b in zip(headers, builds, strict=True) if b.result().status not in ("ok", "skipped")]
            print(f"== prebuilt {len(builds)} sources ({len(failed)} not ok: {failed})", flush=True)
            for mode in modes:
                print(f"== static guards {mode}, device {args.device}, {len(headers)} kernels", flush=True)
                rows = _sweep(headers, cfg, pool, mode, keep)
                ok = sum(r["verdict"] == "OK" for r in rows)
                missed = sum(r["verdict"] == "OK" and not r["claim_met"] for r in rows)
                summaries.append(f"honest corpus: {ok}/{len(rows)} OK (false positives: {len(rows) - ok}) "
                                 f"[static {mode}; OK below their speedup claim: {missed}]")
        finally:
            pool.close()
    for line in summaries:
        print(line)
    return 0 if all(r["verdict"] == "OK" for r in all_rows) else 1


if __name__ == "__main__":
    sys.exit(main())
