"""Where a worker exchange's time goes, from the judges' round traces (evalfarm.judge.round_trace).

    EVALFARM_ROUND_TRACE=/tmp/rt evalfarm score --task T --candidate C --json
    python scripts/round_trace_summary.py /tmp/rt            # one table per trace file
    python scripts/round_trace_summary.py /tmp/rt --json     # the same figures as JSON

For each trace (one evaluation) and each worker: the median microseconds of every step of its
lone-call exchanges (correctness blocks left out), the steps the worker does not report
(``prepare_rest``: prepare round trip minus poisoning and quiet wait; ``go_rest``: go round trip
minus the worker's pre-call, call and post-call parts) and the judge's own time between exchanges
(``between``). Then the paired rounds whose times could be timing samples: how many, the median
speedup by the worker's clock and by CUDA events, and their robust spread (interquartile range /
1.349 / median), which sets how many rounds the confidence interval needs.

Correctness blocks get a table of their own: per worker, the median over its blocks of each
step per round (the judge's ``prepare``, ``write`` and ``go`` divided by the block's rounds; the
worker's ``prep`` (poisoning, L2 reset and sync before each call but the first), ``pre``, ``call``
and ``post`` averaged over its rounds) and ``rest``: ``go`` less the worker's parts, per round (its
"called" messages and the judge reading them), then the judge's time after the block per round.

Timed blocks (evalfarm.judge.timed_blocks) get a table of their own: per worker, the median over
its timed calls (each block's warm-up call left out) of the call, of ``pre`` (gate to call start:
the input copy and the flush), of the judge's window (gate opened to done word seen) and of
``after`` (the window less the call and ``pre``: the output copy, the done word and how late the
judge saw it); then the calls paired by round, as for lone calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalfarm.judge.round_trace import JUDGE_STEPS  # noqa: E402
from evalfarm.judge.timed_blocks import WARMUP_CALLS  # noqa: E402

# The rows of a table: the judge's steps with the worker's parts and the derived rests beside them.
STEPS = ("warm_us", "prepare_us", "poison_us", "quiet_us", "prepare_rest", "stop_us", "judge_quiet_us", "write_us",
         "resume_us", "go_us", "pre_us", "call_us", "event_us", "post_us", "go_rest", "ahead_us", "ahead_poison_us",
         "final_stop_us", "between", "exchange")


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _num(line: dict[str, Any], key: str) -> float:
    v = line.get(key, 0.0)
    return float(v) if isinstance(v, int | float) else 0.0


def derive(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each line with its unreported parts, its whole length and the judge's time after it."""
    out = []
    for k, line in enumerate(lines):
        d = dict(line)
        d["prepare_rest"] = _num(d, "prepare_us") - _num(d, "poison_us") - _num(d, "quiet_us")
        exchange = sum(_num(d, key) for key in JUDGE_STEPS)
        d["exchange"] = exchange
        if not d.get("block"):
            d["go_rest"] = _num(d, "go_us") - _num(d, "pre_us") - _num(d, "call_us") - _num(d, "post_us")
        if k + 1 < len(lines):
            d["between"] = _num(lines[k + 1], "at_us") - _num(d, "at_us") - exchange
        out.append(d)
    return out


def robust_spread(values: list[float]) -> float:
    """Interquartile range / 1.349 / median (a standard deviation's estimate, relative)."""
    if len(values) < 8:
        return float("nan")
    q = statistics.quantiles(values, n=4)
    med = statistics.median(values)
    return (q[2] - q[0]) / 1.349 / med if med else float("nan")


def summarize(lines: list[dict[str, Any]], skip: int) -> dict[str, Any]:
    rows = derive(lines)
    lone = [d for d in rows if not d.get("block") and "call_us" in d and min(d.get("rounds") or [0]) >= skip]
    steps: dict[str, dict[str, float]] = {}
    for role in ("reference", "candidate"):
        mine = [d for d in lone if d["role"] == role]
        steps[role] = {key: round(statistics.median(_num(d, key) for d in mine), 1)
                       for key in STEPS if mine and any(key in d for d in mine)}
        steps[role]["n"] = len(mine)
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for d in lone:
        if d.get("counted"):
            by_round.setdefault(d["rounds"][0], {})[d["role"]] = d
    pairs = [p for p in by_round.values() if len(p) == 2]
    ratio = [_num(p["reference"], "call_us") / _num(p["candidate"], "call_us") for p in pairs
             if _num(p["candidate"], "call_us") > 0]
    ev = [_num(p["reference"], "event_us") / _num(p["candidate"], "event_us") for p in pairs
          if _num(p["candidate"], "event_us") > 0]
    blocks = [d for d in rows if d.get("block") and not d.get("timed")]
    clocks = sorted(int(d["sm_mhz"]) for d in lone if isinstance(d.get("sm_mhz"), int))
    return {
        "exchanges": len(rows), "block_exchanges": len(blocks), "steps_us": steps,
        "timed_pairs": len(ratio),
        "speedup_median": round(statistics.median(ratio), 4) if ratio else None,
        "speedup_spread": round(robust_spread(ratio), 4) if ratio else None,
        "event_speedup_median": round(statistics.median(ev), 4) if ev else None,
        "event_speedup_spread": round(robust_spread(ev), 4) if ev else None,
        "sm_mhz": [clocks[0], clocks[len(clocks) // 2], clocks[-1]] if clocks else None,  # min, median, max
        "correctness_blocks": correctness_blocks(rows),
        "timed_blocks": timed_blocks(rows, skip),
        "paired_round_ms": round(statistics.median(_num(p["reference"], "exchange") + _num(p["candidate"], "exchange")
                                                   + _num(p["reference"], "between") + _num(p["candidate"], "between")
                                                   for p in pairs) / 1e3, 3) if pairs else None,
    }


def _mean(values: Any) -> float:
    values = values if isinstance(values, list) else [values]
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return sum(numbers) / len(numbers) if numbers else 0.0


BLOCK_STEPS = ("prepare", "write", "go", "prep", "pre", "call", "post", "rest", "between")


def correctness_blocks(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The correctness blocks' cost per round: per worker, the median over its blocks of each step
    divided by (or averaged over) the block's rounds (us); None without blocks."""
    out: dict[str, Any] = {}
    for role in ("reference", "candidate"):
        per_block = []
        for d in rows:
            if not d.get("block") or d.get("timed") or d.get("role") != role or not d.get("rounds"):
                continue
            n = len(d["rounds"])
            step = {"prepare": _num(d, "prepare_us") / n, "write": _num(d, "write_us") / n,
                    "go": _num(d, "go_us") / n, "between": _num(d, "between") / n}
            for key in ("prep", "pre", "call", "post"):
                step[key] = _mean(d.get(f"{key}_us", 0.0))
            step["rest"] = step["go"] - sum(step[key] for key in ("prep", "pre", "call", "post"))
            step["rounds"] = n
            per_block.append(step)
        if per_block:
            out[role] = {key: round(statistics.median(b[key] for b in per_block), 1) for key in (*BLOCK_STEPS, "rounds")}
            out[role]["blocks"] = len(per_block)
    return out or None


def timed_blocks(rows: list[dict[str, Any]], skip: int) -> dict[str, Any] | None:
    """The timed blocks' calls: per worker the medians of call, pre, judge window and after (us), and
    the calls paired by round (speedup median and spread by the workers' event times); None without."""
    calls: dict[str, dict[int, dict[str, float]]] = {"reference": {}, "candidate": {}}
    for d in rows:
        if not (d.get("block") and d.get("timed")) or d.get("role") not in calls:
            continue
        for k, (r, call, pre, judge) in enumerate(zip(d.get("rounds") or [], d.get("call_us") or [],
                                                      d.get("pre_us") or [], d.get("judge_us") or [], strict=False)):
            if k >= WARMUP_CALLS and r >= skip:
                calls[d["role"]][r] = {"call": call, "pre": pre, "judge": judge, "after": judge - call - pre}
    if not any(calls.values()):
        return None
    out: dict[str, Any] = {}
    for role, mine in calls.items():
        out[role] = {key: round(statistics.median(c[key] for c in mine.values()), 1) if mine else None
                     for key in ("call", "pre", "judge", "after")}
        out[role]["n"] = len(mine)
    ratio = [calls["reference"][r]["call"] / calls["candidate"][r]["call"]
             for r in calls["reference"].keys() & calls["candidate"].keys() if calls["candidate"][r]["call"] > 0]
    out["pairs"] = len(ratio)
    out["speedup_median"] = round(statistics.median(ratio), 4) if ratio else None
    out["speedup_spread"] = round(robust_spread(ratio), 4) if ratio else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="the EVALFARM_ROUND_TRACE directory (or one .jsonl file)")
    ap.add_argument("--skip", type=int, default=10, help="leave out the rounds before this one (warm-up)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = ap.parse_args()
    files = [args.dir] if args.dir.is_file() else sorted(args.dir.glob("rounds-*.jsonl"))
    if not files:
        raise SystemExit(f"no rounds-*.jsonl under {args.dir}: was EVALFARM_ROUND_TRACE set for the judge?")
    results = {f.name: summarize(load(f), args.skip) for f in files}
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for name, res in results.items():
        print(f"\n{name}: {res['exchanges']} exchanges ({res['block_exchanges']} correctness blocks), "
              f"{res['timed_pairs']} timed pairs, paired round {res['paired_round_ms']} ms; speedup "
              f"{res['speedup_median']} (spread {res['speedup_spread']}), by events {res['event_speedup_median']} "
              f"(spread {res['event_speedup_spread']})"
              + (f"; SM clock min/median/max {res['sm_mhz']} MHz" if res["sm_mhz"] else ""))
        steps = res["steps_us"]
        keys = [k for k in (*STEPS, "n") if any(k in steps[r] for r in steps)]
        print("| step (median us) | " + " | ".join(steps) + " |")
        print("|---|" + "---:|" * len(steps))
        for k in keys:
            print(f"| {k} | " + " | ".join(str(steps[r].get(k, "-")) for r in steps) + " |")
        blocks = res["correctness_blocks"]
        if blocks:
            roles = list(blocks)
            print("\ncorrectness blocks, per round (median over blocks, us):")
            print("| step | " + " | ".join(roles) + " |\n|---|" + "---:|" * len(roles))
            for k in (*BLOCK_STEPS, "rounds", "blocks"):
                print(f"| {k} | " + " | ".join(str(blocks[r][k]) for r in roles) + " |")
        timed = res["timed_blocks"]
        if timed:
            print(f"\ntimed blocks: {timed['pairs']} calls paired by round, speedup {timed['speedup_median']} "
                  f"(spread {timed['speedup_spread']})")
            print("| timed call (median us) | reference | candidate |\n|---|---:|---:|")
            for k in ("call", "pre", "judge", "after", "n"):
                print(f"| {k} | {timed['reference'][k]} | {timed['candidate'][k]} |")


if __name__ == "__main__":
    main()
