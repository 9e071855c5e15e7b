"""How close the farm's times are to a one-process, do_bench-style measurement of the same code.

    python benchmarks/timing_fidelity.py --device cuda --tasks L1/1:small,L1/1:default,L2/3:small \
        --kernelbench ../shared/kernelbench/KernelBench --kb 32_HardTanh,95_CrossEntropyLoss --out out/

For each task (a built-in id with a size profile, or a KernelBench level-1 file at the size given in
KB_SIZES, the sizes CUDA-L1's H100 runs used) and each candidate (an identical copy of the
reference, and the task's shipped fast variants for the device):

* one process: the reference and the candidates timed as ``triton.testing.do_bench`` does it, in
  this process (calls queued on the stream, each after an L2 flush, between CUDA events; on a CPU
  the host clock), interleaved in chunks so drifting clocks hit them alike; the median call;
* the farm: ``evalfarm.score`` under each arm of ``--protocols`` (``ARMS``: the queued "blocks"
  and the earlier "lone" calls of ``ScoreConfig.timing_protocol``, and "unplaced": blocks with each
  timed call's memory left where it was, ``EVALFARM_PLACE_CALLS=0``, evalfarm.judge.placement), its
  reference and candidate medians and its score. With ``--repeats`` N each candidate is scored N
  times under each arm, the arms taking turns, so the spread between evaluations is seen beside each
  evaluation's interval. Where an arm sets the judge's environment, every arm's evaluations start a
  judge of their own (no standby judges, whose environment is fixed when they start).

A table is printed last (markdown) and every row is written to ``OUT/fidelity.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalfarm import ScoreConfig  # noqa: E402
from evalfarm.build import BuildPool  # noqa: E402
from evalfarm.judge.standby import WarmJudges  # noqa: E402
from evalfarm.scoring import as_candidate, as_task, score  # noqa: E402
from evalfarm.tasks import builtin_suite, instantiate_task  # noqa: E402
from evalfarm.tasks.format import exec_module  # noqa: E402

# CUDA-L1's sizes for short KernelBench level-1 tasks (calls of tens of microseconds on an H100).
KB_SIZES = {
    "19_ReLU": {"batch_size": 16, "dim": 16384},
    "32_HardTanh": {"batch_size": 16, "dim": 16384},
    "23_Softmax": {"batch_size": 16, "dim": 16384},
    "88_MinGPTNewGelu": {"batch_size": 2000, "dim": 2000},
    "95_CrossEntropyLoss": {"batch_size": 4096, "num_classes": 10},
}


# An arm of the comparison: the timing protocol and the judge's environment it runs under.
ARMS = {
    "blocks": ("blocks", {}),
    "lone": ("lone", {}),
    "unplaced": ("blocks", {"EVALFARM_PLACE_CALLS": "0"}),
}
ARM_ENV_KEYS = sorted({k for _, env in ARMS.values() for k in env})


def arm_score(task, src: str, cfg: ScoreConfig, arm: str, pool: BuildPool, judges: WarmJudges | None) -> dict:
    """One farm evaluation under ``arm`` (its environment set only for this evaluation's judge)."""
    protocol, env = ARMS[arm]
    saved = {k: os.environ.get(k) for k in ARM_ENV_KEYS}
    for k in ARM_ENV_KEYS:
        os.environ.pop(k, None)
    os.environ.update(env)
    try:
        return farm_row(score(task, as_candidate(src), cfg.replace(timing_protocol=protocol), build_pool=pool,
                              judges=judges))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def kb_task_source(root: Path, name: str) -> str:
    text = (root / "level1" / f"{name}.py").read_text()
    for var, value in KB_SIZES.get(name, {}).items():
        text = re.sub(rf"^{var} = .*$", f"{var} = {value}", text, count=1, flags=re.M)
    return text


def identical_copy(task_source: str) -> str:
    """The task's own code as a candidate (the reference's class under the candidate's name)."""
    return task_source + "\n\nclass ModelNew(Model):\n    pass\n"


def one_process_us(task, profile: str, sources: dict[str, str], device: str, chunks: int = 5,
                   per_chunk: int = 50, queued: bool = False) -> dict[str, float]:
    """Median call (us) of the reference and of each candidate source, do_bench-style; ``queued``
    (a GPU): each chunk's calls queued behind a busy kernel first, as nvbench's blocking kernel
    does, so the device never waits for the host's launches (the device's own time)."""
    module = instantiate_task(task, profile)
    torch.manual_seed(0)
    inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in module.get_inputs()]
    init = module.get_init_inputs()
    fns = {}
    torch.manual_seed(1)
    fns["reference"] = module.Model(*init).to(device)
    for name, src in sources.items():
        cand = exec_module(src, f"fidelity_{name}", f"{name}.py")
        torch.manual_seed(1)
        fns[name] = cand.ModelNew(*init).to(device)
    cuda = device.startswith("cuda")
    flush = torch.empty(2 * (torch.cuda.get_device_properties(device).L2_cache_size if cuda else 0) or 1,
                        dtype=torch.uint8, device=device)
    times: dict[str, list[float]] = {k: [] for k in fns}
    with torch.no_grad():
        for fn in fns.values():
            for _ in range(10):
                fn(*inputs)
        if cuda:
            torch.cuda.synchronize()
        for _ in range(chunks):
            for name, fn in fns.items():
                if cuda:
                    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                          for _ in range(per_chunk)]
                    if queued:
                        torch.cuda._sleep(50_000_000)  # tens of ms of device time while the host queues
                    for a, b in ev:
                        flush.zero_()
                        a.record()
                        fn(*inputs)
                        b.record()
                    torch.cuda.synchronize()
                    times[name] += [a.elapsed_time(b) * 1000.0 for a, b in ev]
                else:
                    for _ in range(per_chunk):
                        t0 = time.perf_counter_ns()
                        fn(*inputs)
                        times[name].append((time.perf_counter_ns() - t0) / 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def farm_row(r) -> dict:
    """One farm evaluation's figures (times in us, the raw speedup and its interval)."""
    t = r.evidence.timing
    return {"verdict": r.verdict.value, "speedup": r.speedup, "detail": r.detail[:300],
            **({"ref_us": t.ref_time_us_median, "cand_us": t.cand_time_us_median,
                "raw": t.raw_speedup, "ci": [t.ci_low, t.ci_high], "rounds": t.rounds,
                "protocol": t.protocol, "seconds": t.seconds,
                "charge_us": max(t.pre_call_charge_us, t.exchange_charge_us),
                "excess_us": t.exchange_excess_us,
                "pre_us": [t.pre_call_ref_us_median, t.pre_call_cand_us_median],
                "untimed_us": [t.untimed_ref_us_median, t.untimed_cand_us_median],
                "tail_us": [t.tail_ref_us_median, t.tail_cand_us_median]} if t else {}),
            # where the evaluation's time went (rounds_* split the timed rounds' exchange)
            "phases_s": {k: round(v, 4) for k, v in (r.evidence.phases_s or {}).items()}}


def repeats_table(rows: list[dict], protocols: list[str]) -> None:
    """Where a candidate was scored several times: each evaluation's speedup and interval, and the
    spread between evaluations beside the intervals' half-width (an interval that holds the
    between-evaluation spread is about as wide as twice that spread)."""
    lines = []
    for row in rows:
        for p in protocols:
            reps = [f for f in row.get(f"{p}_repeats", []) if f.get("raw")]
            if len(reps) < 2:
                continue
            raws = [f["raw"] for f in reps]
            half = statistics.mean((f["ci"][1] - f["ci"][0]) / 2 for f in reps)
            cells = ", ".join(f"{f['raw']:.3f} [{f['ci'][0]:.3f}, {f['ci'][1]:.3f}]" for f in reps)
            lines.append(f"| {row['task']} | {row['candidate']} | {p} | {cells} | {statistics.stdev(raws):.3f} "
                         f"| {half:.3f} | {statistics.mean(f['ref_us'] for f in reps):.1f} |")
    if lines:
        print("\n## Repeated evaluations (raw speedups [95% CI]; SD between evaluations; mean CI half-width)\n")
        print("| task | candidate | protocol | evaluations | SD between | CI half-width | ref us (mean) |")
        print("|---|---|---|---|---:|---:|---:|")
        print("\n".join(lines))


def measure(work: list, protocols: list[str], args: argparse.Namespace, pool: BuildPool, judges: WarmJudges | None,
            out: Path, start: float) -> list[dict]:
    """One row per (task, candidate): the one-process times, then the farm's under each protocol."""
    rows: list[dict] = []
    for label, task, profile, cands in work:
        if time.monotonic() - start > args.max_seconds:
            print(f"stopping before {label}: {args.max_seconds:.0f} s used", flush=True)
            break
        try:
            local = one_process_us(task, profile, cands, args.device, chunks=args.chunks)
            queued = (one_process_us(task, profile, cands, args.device, chunks=args.chunks, queued=True)
                      if args.device != "cpu" else local)
        except Exception as err:  # noqa: BLE001 - a row that cannot run says why
            print(f"{label}: one-process timing failed: {type(err).__name__}: {err}", flush=True)
            continue
        for name, src in cands.items():
            if time.monotonic() - start > args.max_seconds:
                print(f"stopping before {label} {name}: {args.max_seconds:.0f} s used", flush=True)
                return rows
            row = {"task": label, "candidate": name, "ref_1p_us": local["reference"], "cand_1p_us": local[name],
                   "speedup_1p": local["reference"] / local[name], "ref_q_us": queued["reference"],
                   "cand_q_us": queued[name], "speedup_q": queued["reference"] / queued[name]}
            cfg = ScoreConfig(device=args.device, num_correctness_inputs=args.inputs,
                              timing_budget_s=args.budget, reverify_above=0, size_profile=profile)
            scored: dict[str, list[dict]] = {arm: [] for arm in protocols}
            for _ in range(args.repeats):  # the arms take turns, so a drifting card hits them alike
                for arm in protocols:
                    scored[arm].append(arm_score(task, src, cfg, arm, pool, judges))
            for arm, evaluations in scored.items():
                row[arm] = evaluations[0]
                if len(evaluations) > 1:
                    row[f"{arm}_repeats"] = evaluations
            rows.append(row)
            print(json.dumps(row), flush=True)
            (out / "fidelity.json").write_text(json.dumps(rows, indent=1))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tasks", default="L1/1:small,L1/1:default,L2/3:small,L2/3:default,L1/3:small")
    ap.add_argument("--kernelbench", default="", help="KernelBench's task root (holds level1/)")
    ap.add_argument("--kb", default="32_HardTanh,95_CrossEntropyLoss")
    ap.add_argument("--protocols", default="blocks,lone", help=f"arms, comma-separated: {', '.join(ARMS)}")
    ap.add_argument("--inputs", type=int, default=100)
    ap.add_argument("--budget", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=1, help="farm evaluations per candidate and protocol")
    ap.add_argument("--chunks", type=int, default=5, help="one-process chunks per function (interleaved)")
    ap.add_argument("--max-seconds", type=float, default=480.0)
    ap.add_argument("--out", default="fidelity-out")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    suite = builtin_suite()
    work = []  # (label, task, profile, {candidate name: source}): KernelBench's short tasks first
    if args.kernelbench:
        for name in filter(None, args.kb.split(",")):
            src = kb_task_source(Path(args.kernelbench), name)
            work.append((f"KB {name}", as_task(src), "default", {"identical": identical_copy(src)}))
    for item in filter(None, args.tasks.split(",")):
        key, _, profile = item.partition(":")
        task = suite.load(key)
        cands = {"identical": identical_copy(task.source)}
        for v in suite.variants(key):
            if v.kind == "fast" and v.runs_on(args.device):
                cands[v.path.stem] = v.path.read_text()
        work.append((f"{key}:{profile or 'default'}", task, profile or "default", cands))
    protocols = [p for p in args.protocols.split(",") if p]
    unknown = [p for p in protocols if p not in ARMS]
    if unknown:
        ap.error(f"unknown arm(s) {', '.join(unknown)}: expected {', '.join(ARMS)}")
    # Standby judges keep the environment they started with: none where an arm sets one.
    judges = None if any(ARMS[p][1] for p in protocols) else WarmJudges({args.device: 1})
    try:
        with BuildPool(max_workers=4) as pool:
            rows = measure(work, protocols, args, pool, judges, out, start)
    finally:
        if judges is not None:
            judges.close()
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"\n## Timing fidelity on {device_name} (us; speedups)\n")
    print("1p: one process, do_bench-style; 1p queued: the same behind a busy kernel (the device's own time); "
          "the farm's reference time as a ratio to 1p queued, and the protocol that ran.\n")
    print("| task | candidate | ref 1p | ref 1p queued | " + " | ".join(f"ref {p}" for p in protocols)
          + " | speedup 1p | 1p queued | " + " | ".join(protocols) + " |")
    print("|" + "---|" * (4 + 2 * len(protocols) + 2))
    for row in rows:
        cells = [row["task"], row["candidate"], f"{row['ref_1p_us']:.1f}", f"{row['ref_q_us']:.1f}"]
        for p in protocols:
            f = row.get(p, {})
            cells.append(f"{f['ref_us']:.1f} ({f['ref_us'] / row['ref_q_us']:.2f}, {f.get('protocol')})"
                         if f.get("ref_us") else f.get("verdict", "-"))
        cells += [f"{row['speedup_1p']:.2f}", f"{row['speedup_q']:.2f}"]
        for p in protocols:
            f = row.get(p, {})
            cells.append(f"{f['raw']:.2f} [{f['ci'][0]:.2f}, {f['ci'][1]:.2f}]" if f.get("raw") else f.get("verdict", "-"))
        print("| " + " | ".join(cells) + " |")
    repeats_table(rows, protocols)


if __name__ == "__main__":
    main()
