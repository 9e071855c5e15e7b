"""Does a judge starting up on the same device disturb an evaluation's timed calls?

Scores one candidate ``--runs`` times per setting, interleaved: "quiet" (nothing else starts)
and "start-ups" (a background thread starts a fresh standby judge, with its two workers and
their CUDA contexts, every ``--every`` seconds while the evaluation runs, and kills it once it is
up). If the speedups of the two settings agree (means within each other's spread), the farm
could let timed rounds overlap a standby's start-up (evalfarm.judge.serve.RoundsHold sets their
times aside today, which costs short evaluations a wait of about one start-up each).

    python benchmarks/probes/standby_interference_probe.py --device cuda --runs 5
    python benchmarks/probes/standby_interference_probe.py --device cpu --runs 2 --inputs 20 --budget 0.5   # smoke

Prints one line per run and a summary per setting: mean speedup, coefficient of variation, the
candidate's and reference's median call times, and how many start-ups overlapped the runs.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from evalfarm import ScoreConfig
from evalfarm.judge import framing
from evalfarm.judge.standby import JudgeProcess
from evalfarm.scoring import as_candidate, as_task, score
from evalfarm.tasks.suite import builtin_suite


class StartUps(threading.Thread):
    """Start a standby judge every ``every_s`` seconds until stopped; each is killed once ready."""

    def __init__(self, device: str, every_s: float) -> None:
        super().__init__(daemon=True)
        self.device, self.every_s = device, every_s
        self.halt = threading.Event()
        self.started = 0

    def run(self) -> None:
        while not self.halt.is_set():
            judge = JudgeProcess(self.device, request_timeout_s=120)
            self.started += 1
            try:
                deadline = time.monotonic() + 60
                while not judge.ready and time.monotonic() < deadline and not self.halt.is_set():
                    if judge.conn.poll(0.05):
                        judge.note_message(framing.recv_json(judge.conn, 0))
            finally:
                judge.close()
            self.halt.wait(self.every_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--task", default="L1/1")
    ap.add_argument("--variant", default="fast_cuda_fused_elementwise.py", help="a built-in variant of the task")
    ap.add_argument("--runs", type=int, default=5, help="evaluations per setting")
    ap.add_argument("--inputs", type=int, default=100)
    ap.add_argument("--budget", type=float, default=3.0, help="timing budget per evaluation, seconds")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between one start-up's end and the next")
    args = ap.parse_args()
    suite = builtin_suite()
    task = as_task(str(suite.find(args.task).path))
    variants = {v.path.name: v.path for v in suite.variants(args.task)}
    if args.variant not in variants:
        raise SystemExit(f"{args.task} has no variant {args.variant!r}; it has {sorted(variants)}")
    cand = as_candidate(str(variants[args.variant]))
    cfg = ScoreConfig(device=args.device, num_correctness_inputs=args.inputs, timing_budget_s=args.budget,
                      reverify_above=1e6)
    rows: dict[str, list[tuple[float, float, float]]] = {"quiet": [], "start-ups": []}
    overlapped = 0
    for i in range(args.runs):
        for setting in rows:
            noise = StartUps(args.device, args.every) if setting == "start-ups" else None
            if noise is not None:
                noise.start()
            try:
                r = score(task, cand, cfg)
            finally:
                if noise is not None:
                    noise.halt.set()
                    noise.join(90)
                    overlapped += noise.started
            t = r.evidence.timing
            if r.speedup is None or t is None:
                print(f"run {i + 1} {setting}: {r.verdict.value} {r.detail[:200]}")
                continue
            rows[setting].append((r.speedup, t.cand_time_us_median, t.ref_time_us_median))
            print(f"run {i + 1} {setting:9s}: {r.speedup:.3f}x  candidate {t.cand_time_us_median:.1f} us  "
                  f"reference {t.ref_time_us_median:.1f} us  rounds {t.rounds}"
                  + (f"  start-ups {noise.started}" if noise is not None else ""), flush=True)
    print(f"\n{args.task} {args.variant} on {args.device}, {args.inputs} inputs, {args.budget:g} s budget; "
          f"{overlapped} start-ups overlapped the 'start-ups' runs")
    print("| setting | runs | mean speedup | CV | candidate us (median) | reference us (median) |")
    print("|---|---|---|---|---|---|")
    for setting, got in rows.items():
        if not got:
            print(f"| {setting} | 0 | - | - | - | - |")
            continue
        sp = [g[0] for g in got]
        mean = statistics.fmean(sp)
        cv = statistics.stdev(sp) / mean if len(sp) > 1 else 0.0
        print(f"| {setting} | {len(sp)} | {mean:.3f} | {cv:.1%} | {statistics.median(g[1] for g in got):.1f} | "
              f"{statistics.median(g[2] for g in got):.1f} |")


if __name__ == "__main__":
    main()
