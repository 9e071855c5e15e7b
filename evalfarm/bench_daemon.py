"""A daemon benchmark: a stream of candidates through a real `evalfarm serve`, as RL sends them.

    python -m evalfarm.bench_daemon --device cuda --candidates 200 --group 8 --out bench-daemon/
    make bench-daemon DEVICE=cpu                       # a short CPU run (small task profiles)

The stream takes G candidates per task, round-robin over the built-in tasks that have variants
for the device: the task's fast and wrong variants and an identical copy of its reference, cycled,
each made unique (a trailing comment) so every one is a fresh evaluation (extension builds are
cached by their sources, so a CUDA build is paid once per variant; the first-build seconds are
reported apart). All are submitted at once through FarmClient, which keeps the daemon's queue and
builders fed as its credits allow. Reported (printed, and written as ``bench_daemon.json`` and
``bench_daemon.md`` under ``--out``):

* candidates per minute, median and p95 seconds per candidate (latency from submission to result,
  and the evaluation's own wall seconds by phase from its evidence: setup, load, correctness, timing);
* the daemon's queue depth over time (its Capacity RPC, sampled every ``--sample-every`` seconds);
* GPU busy fraction: NVML utilisation sampled over the stream (GPU only, when NVML loads);
* the reward CV: ``--rescore`` fast candidates scored ``--repeats`` times each, fresh every time.

The numbers describe the machine it ran on; docs/benchmarks.md keeps the method and results.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from evalfarm.server.local import LocalDaemon, LocalDaemonError

log = logging.getLogger("evalfarm.bench_daemon")


@dataclasses.dataclass(frozen=True)
class StreamItem:
    task: str  # built-in task id, e.g. "L1/1"
    variant: str  # variant file name, or "identical"
    kind: str  # "fast" | "wrong" | "identical"
    source: str


def identical_source(task_source: str) -> str:
    """The task's reference as a candidate (renamed to ModelNew): it must score 1.00."""
    return task_source.replace("class Model(", "class ModelNew(").replace("super(Model, self)", "super(ModelNew, self)")


def build_stream(device: str, n: int, group: int, tasks: list[str] | None = None) -> list[StreamItem]:
    """``n`` candidates, ``group`` per task in turn, each source unique; ``tasks`` (built-in ids,
    e.g. ``["L1/7", "L3/1"]``, in that order) limits the stream to those tasks."""
    from evalfarm.tasks import builtin_suite

    suite = builtin_suite()
    known = {f"L{entry.level}/{entry.number}": entry for entry in suite.entries}
    keys = list(known)
    if tasks:
        unknown = [t for t in tasks if t not in known]
        if unknown:
            raise SystemExit(f"--tasks: no built-in task {', '.join(unknown)}; the built-in tasks are "
                             f"{', '.join(keys)}")
        keys = list(dict.fromkeys(tasks))
    per_task: list[list[StreamItem]] = []
    for key in keys:
        variants = [v for v in suite.variants(key) if v.runs_on(device)]
        if not variants:
            if tasks:
                raise SystemExit(f"--tasks: built-in task {key} has no variants for device {device!r}")
            continue
        items = [StreamItem(key, v.path.name, v.kind, v.load().source) for v in variants]
        items.append(StreamItem(key, "identical", "identical", identical_source(suite.load(key).source)))
        per_task.append(items)
    if not per_task:
        raise SystemExit(f"no built-in task has variants for device {device!r}")
    stream: list[StreamItem] = []
    t = 0
    while len(stream) < n:
        items = per_task[t % len(per_task)]
        for g in range(min(group, n - len(stream))):
            it = items[g % len(items)]
            stream.append(dataclasses.replace(it, source=it.source + f"\n# bench-daemon sample {len(stream)}\n"))
        t += 1
    return stream


class Sampler(threading.Thread):
    """Samples the daemon's queue depth (Capacity) and, on a GPU, NVML utilisation."""

    def __init__(self, client: Any, every_s: float, gpu: bool) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.client, self.every_s = client, every_s
        self.queue: list[tuple[float, int, int]] = []  # (seconds, queue depth, running)
        self.util: list[float] = []  # mean over the host's GPUs, per sample
        self.util_per_gpu: list[list[float]] = []
        self.slots: int | None = None  # from the daemon's Capacity
        self.gpu_model = ""
        self._halt = threading.Event()
        self._nvml: Any = None
        if gpu:
            try:
                import pynvml

                pynvml.nvmlInit()
                handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
                self._nvml = (pynvml, handles)
            except Exception as err:  # noqa: BLE001 - GPU busy is then reported as unknown
                log.warning("no NVML (%s): GPU busy fraction not measured", err)
        self.t0 = time.monotonic()

    def run(self) -> None:
        while not self._halt.wait(self.every_s):
            try:
                caps = self.client._call(self.client._client.capacity(), 10.0)  # noqa: SLF001
                cap = next(iter(caps.values()))
                if cap is not None:
                    self.queue.append((round(time.monotonic() - self.t0, 2), cap.queue_depth, cap.running))
                    self.slots = int(cap.slots)
                    self.gpu_model = str(getattr(cap, "gpu_model", "") or "")
            except Exception as err:  # noqa: BLE001 - a missed sample is not a failed run
                log.debug("capacity sample failed: %s", err)
            if self._nvml is not None:
                nv, handles = self._nvml
                per = [float(nv.nvmlDeviceGetUtilizationRates(h).gpu) for h in handles]
                self.util_per_gpu.append(per)
                self.util.append(statistics.fmean(per) if per else 0.0)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


class Interrupted(Exception):
    """SIGTERM (e.g. from `timeout`): stop and report what finished."""


def _on_term(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second TERM must not cut the report short
    raise Interrupted


def run_stream(client: Any, stream: list[StreamItem], options: dict[str, Any], timeout_s: float,
               rows: list[dict[str, Any]]) -> None:
    """Submit the stream and append one row per result to ``rows`` as results arrive."""
    from tqdm import tqdm

    sent: dict[str, tuple[StreamItem, float]] = {}
    for i, it in enumerate(stream):
        sid = client.submit(it.task, it.source, f"bench-{i}", options=options)
        sent[sid] = (it, time.monotonic())
    with tqdm(total=len(stream), desc="candidates", unit="cand") as bar:
        for res in client.results(timeout=timeout_s):
            it, t_sent = sent[res.sample_id]
            ev = res.result.evidence
            rows.append({
                "sample_id": res.sample_id, "task": it.task, "variant": it.variant, "kind": it.kind,
                "verdict": res.verdict.value, "speedup": res.speedup, "latency_s": time.monotonic() - t_sent,
                "phases_s": dict(ev.phases_s), "seconds": ev.timing.seconds if ev.timing else None,
                "block_rounds": ev.timing.block_rounds if ev.timing else None,
                "blocks": ev.timing.blocks if ev.timing else None,
                "timed_rounds": ev.timing.rounds if ev.timing else None,
                "build_s": sum(float(e.get("seconds", 0) or 0) for e in ev.build.get("extensions", [])
                               if isinstance(e, dict) and not e.get("cache_hit")),
                "done_at": time.monotonic(),
            })
            bar.update(1)


def reward_cv(client: Any, stream: list[StreamItem], count: int, repeats: int, options: dict[str, Any],
              timeout_s: float) -> list[dict[str, Any]]:
    """``count`` fast candidates, each scored ``repeats`` times afresh: the spread of their reward."""
    fast = [it for it in stream if it.kind == "fast"]
    picked: list[StreamItem] = []
    for it in fast:
        if it.variant not in {p.variant for p in picked}:
            picked.append(it)
    picked = picked[:count]
    ids: dict[str, StreamItem] = {}
    for it in picked:
        for r in range(repeats):
            sid = client.submit(it.task, it.source + f"# rescore {r}\n", f"cv-{it.variant}-{r}", options=options)
            ids[sid] = it
    by: dict[str, list[float]] = {}
    for res in client.results(timeout=timeout_s):
        if res.speedup is not None:
            by.setdefault(ids[res.sample_id].variant, []).append(res.speedup)
    out = []
    for it in picked:
        s = by.get(it.variant, [])
        cv = statistics.pstdev(s) / statistics.fmean(s) if len(s) >= 2 and statistics.fmean(s) > 0 else None
        out.append({"task": it.task, "variant": it.variant, "speedups": s, "cv": cv})
    return out


def summarise(rows: list[dict[str, Any]], wall_s: float, sampler: Sampler, cv: list[dict[str, Any]],
              device: str) -> dict[str, Any]:
    lat = [r["latency_s"] for r in rows]
    evals = [r["phases_s"].get("total", sum(r["phases_s"].values())) for r in rows if r["phases_s"]]
    phases: dict[str, float] = {}
    for name in sorted({k for r in rows for k in r["phases_s"]}):
        vals = [r["phases_s"][name] for r in rows if name in r["phases_s"]]
        phases[name] = statistics.median(vals)
    verdicts: dict[str, int] = {}
    for r in rows:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    return {
        "device": device, "candidates": len(rows), "wall_s": round(wall_s, 1),
        "candidates_per_minute": round(60 * len(rows) / wall_s, 2) if wall_s > 0 else None,
        "latency_s_median": _pct(lat, 0.5), "latency_s_p95": _pct(lat, 0.95),
        "evaluation_s_median": _pct(evals, 0.5), "evaluation_s_p95": _pct(evals, 0.95),
        "phase_s_median": phases, "first_build_s_total": round(sum(r["build_s"] for r in rows), 1),
        "verdicts": verdicts,
        "queue_depth_max": max((q for _, q, _ in sampler.queue), default=None),
        "queue_depth_samples": sampler.queue,
        "gpu_busy_fraction": round(statistics.fmean(sampler.util) / 100, 3) if sampler.util else None,
        "gpu_busy_fraction_per_gpu": [round(statistics.fmean(col) / 100, 3) for col in zip(*sampler.util_per_gpu,
                                                                                        strict=True)],
        "slots": sampler.slots, "gpu_model": sampler.gpu_model,
        "candidates_per_minute_per_slot": (round(60 * len(rows) / wall_s / sampler.slots, 2)
                                           if wall_s > 0 and sampler.slots else None),
        "reward_cv": cv,
    }


def markdown(s: dict[str, Any]) -> str:
    def f(x: Any, fmt: str = ".2f") -> str:
        return "-" if x is None else format(x, fmt)

    cut = ", interrupted: the candidates that finished" if s.get("interrupted") else ""
    warm = s.get("warm_judges")
    warm_note = "" if warm is None else f", --warm-judges {warm}"
    if s.get("correctness_block") is False:
        warm_note += ", correctness blocks off"
    if s.get("warm_call") in ("on", "off"):
        warm_note += f", warm calls {s['warm_call']}"
    if s.get("standby_hold") in ("on", "off"):
        warm_note += f", standby hold {s['standby_hold']}"
    if s.get("tasks"):
        warm_note += f", tasks {','.join(s['tasks'])}"
    lines = [f"# Daemon benchmark ({s['device']}, {s['candidates']} candidates in {s['wall_s']} s{warm_note}{cut})", "",
             "| candidates/min | per slot | latency median s | latency p95 s | evaluation median s | "
             "evaluation p95 s | GPU busy | queue depth max |", "|---|---|---|---|---|---|---|---|",
             f"| {f(s['candidates_per_minute'])} | {f(s.get('candidates_per_minute_per_slot'))} | "
             f"{f(s['latency_s_median'])} | {f(s['latency_s_p95'])} | "
             f"{f(s['evaluation_s_median'])} | {f(s['evaluation_s_p95'])} | {f(s['gpu_busy_fraction'], '.0%')} | "
             f"{s['queue_depth_max']} |", "",
             f"Slots: {s.get('slots') if s.get('slots') is not None else 'unknown'}, device model the client "
             f"routes by: {s.get('gpu_model') or 'unknown (mixed or not reported)'}"
             + ("; GPU busy per GPU: " + ", ".join(f"{x:.0%}" for x in s["gpu_busy_fraction_per_gpu"])
                if s.get("gpu_busy_fraction_per_gpu") else ""), "",
             "Median seconds per phase: " + ", ".join(f"{k} {v:.2f}" for k, v in s["phase_s_median"].items()),
             f"First builds (not cached): {s['first_build_s_total']} s in all. Verdicts: "
             + ", ".join(f"{k} {v}" for k, v in sorted(s["verdicts"].items())), "",
             "| reward CV: task | variant | speedups | CV |", "|---|---|---|---|"]
    for c in s["reward_cv"]:
        lines.append(f"| {c['task']} | {c['variant']} | {', '.join(f'{x:.2f}' for x in c['speedups'])} | "
                     f"{f(c['cv'], '.2%')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (a local daemon with every GPU, one slot each)")
    ap.add_argument("--endpoint", default="", help="an already running daemon instead of a local one")
    ap.add_argument("--candidates", type=int, default=24, help="candidates in the stream")
    ap.add_argument("--group", type=int, default=4, help="candidates per task in a row (G of an RL group)")
    ap.add_argument("--inputs", type=int, default=None, help="correctness inputs (default: 1000 on cuda, 20 on cpu)")
    ap.add_argument("--budget", type=float, default=None, help="timing budget s (default: 10 on cuda, 0.5 on cpu)")
    ap.add_argument("--rescore", type=int, default=2, help="fast candidates re-scored for the reward CV (0: none)")
    ap.add_argument("--repeats", type=int, default=3, help="times each of them is scored")
    ap.add_argument("--sample-every", type=float, default=1.0, help="seconds between queue/GPU samples")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for any one result")
    ap.add_argument("--out", type=Path, default=Path("bench-daemon"), help="directory for the JSON and Markdown")
    ap.add_argument("--no-correctness-block", dest="correctness_block", action="store_false",
                    help="score every correctness round with its own exchange (ScoreConfig.correctness_block off)")
    ap.add_argument("--warm-judges", type=int, default=None,
                    help="the local daemon's --warm-judges (default: the daemon's own default)")
    ap.add_argument("--standby-hold", choices=("on", "off"), default=None,
                    help="the local daemon's --standby-hold (default: the daemon's own, on)")
    ap.add_argument("--tasks", default="",
                    help="comma-separated built-in task ids the stream cycles over, in order (e.g. L1/7,L1/8,L3/1; "
                         "default: every built-in task with variants for the device)")
    ap.add_argument("--warm-call", choices=("auto", "on", "off"), default="auto",
                    help="ScoreConfig.warm_call for the stream (auto: the farm's default, on for a CPU only)")
    ap.add_argument("--allow-weak-sandbox", action="store_true",
                    help="start the local daemon even where this host has no strong sandbox (it says so)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from evalfarm.client.sync import FarmClient

    gpu = args.device.startswith("cuda")
    options = {"num_correctness_inputs": args.inputs or (1000 if gpu else 20),
               "timing_budget_s": args.budget or (10.0 if gpu else 0.5)}
    if not gpu:
        options["size_profile"] = "small"
    if not args.correctness_block:
        options["correctness_block"] = False
    if args.warm_call != "auto":
        options["warm_call"] = args.warm_call == "on"
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    stream = build_stream("cuda" if gpu else "cpu", args.candidates, args.group, tasks or None)
    args.out.mkdir(parents=True, exist_ok=True)
    daemon = None
    rows: list[dict[str, Any]] = []
    cv: list[dict[str, Any]] = []
    interrupted = False
    signal.signal(signal.SIGTERM, _on_term)
    with tempfile.TemporaryDirectory(prefix="bench-daemon-") as tmp:
        try:
            if not args.endpoint:
                extra = ["--warm-judges", str(args.warm_judges)] if args.warm_judges is not None else []
                if args.standby_hold is not None:
                    extra += ["--standby-hold", args.standby_hold]
                try:
                    daemon = LocalDaemon(device="cuda" if gpu else "cpu", cache_dir=os.path.join(tmp, "cache"),
                                         log_path=args.out / "daemon.log", args=extra, start_timeout_s=180.0,
                                         allow_weak_sandbox=args.allow_weak_sandbox)
                except LocalDaemonError as err:
                    raise SystemExit(str(err)) from None
            client = FarmClient([args.endpoint or daemon.endpoint], default_deadline_s=args.timeout)
            sampler = Sampler(client, args.sample_every, gpu)
            t0 = time.monotonic()
            wall = 0.0
            try:
                sampler.start()
                run_stream(client, stream, options, args.timeout, rows)
                wall = time.monotonic() - t0
                sampler.stop()
                if args.rescore:
                    cv = reward_cv(client, stream, args.rescore, args.repeats, options, args.timeout)
            except (Interrupted, KeyboardInterrupt):
                interrupted = True
                wall = wall or time.monotonic() - t0
                log.warning("interrupted: reporting the %d candidate(s) that finished", len(rows))
            finally:
                sampler.stop()
                client.close(timeout=5.0)
        finally:
            if daemon is not None:
                daemon.stop()
    summary = summarise(rows, wall, sampler, cv, args.device)
    summary["interrupted"] = interrupted
    summary["warm_judges"] = args.warm_judges
    summary["correctness_block"] = args.correctness_block
    summary["warm_call"] = args.warm_call
    summary["standby_hold"] = args.standby_hold
    summary["tasks"] = list(dict.fromkeys(it.task for it in stream))  # in stream order
    (args.out / "bench_daemon.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    text = markdown(summary)
    (args.out / "bench_daemon.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
