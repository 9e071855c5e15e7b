"""An operator's check of a farm host: the documented systemd command line, scraped under load.

Starts `evalfarm serve` exactly as deploy/systemd/evalfarm.service does (its ExecStart, with
`evalfarm` run as `python -m evalfarm.cli` and deploy/systemd/farm.toml copied with its paths
moved under OUT), streams built-in candidates through it with the project's FarmClient while
scraping /metrics every second, then checks that the per-slot series are present and agree
with the results the client got. Writes under OUT: daemon.log (JSON lines), metrics/*.prom
(scrapes), results.jsonl, checks.json and a table (operator_check.md, also printed).

    python3 benchmarks/gpu_operator_check.py --out $OUT                   # GPU host: every GPU
    python3 benchmarks/gpu_operator_check.py --out /tmp/x --device cpu -n 4  # the same on CPU
Exit 0 when every check passes.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import re
import secrets
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from evalfarm.client import FarmClient  # noqa: E402
from evalfarm.server.cli import wait_for_listening_port  # noqa: E402
from evalfarm.tasks.suite import builtin_suite  # noqa: E402

Series = dict[str, list[tuple[dict[str, str], float]]]


def systemd_command(config: Path) -> list[str]:
    """ExecStart of the shipped unit, runnable from this checkout."""
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(REPO / "deploy" / "systemd" / "evalfarm.service")
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[0].endswith("/evalfarm") and argv[1] == "serve", argv
    rest = argv[2:]
    rest[rest.index("--config") + 1] = str(config)
    return [sys.executable, "-m", "evalfarm.cli", "serve", *rest]


def host_config(out: Path, device: str) -> tuple[Path, str, int]:
    """deploy/systemd/farm.toml with its paths under OUT; (path, token, metrics port)."""
    text = (REPO / "deploy" / "systemd" / "farm.toml").read_text()
    token = secrets.token_hex(24)
    (out / "token").write_text(token + "\n")
    (out / "token").chmod(0o600)
    text = text.replace("/etc/evalfarm/token", str(out / "token"))
    text = text.replace("/var/cache/evalfarm", str(out / "cache"))
    text = re.sub(r"^host = .*$", 'host = "127.0.0.1"', text, flags=re.M)
    text = re.sub(r"^port = .*$", "port = 0", text, flags=re.M)
    if device == "cpu":
        text = re.sub(r"^gpus = .*$", 'device = "cpu"\nslots = 2', text, flags=re.M)
    metrics_port = free_port()  # the shipped ports, moved so that nothing else on the host collides
    text = re.sub(r"^metrics-port = .*$", f"metrics-port = {metrics_port}", text, flags=re.M)
    text = re.sub(r"^health-port = .*$", f"health-port = {free_port()}", text, flags=re.M)
    path = out / "farm.toml"
    path.write_text(text)
    return path, token, metrics_port


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def candidates(n: int, device: str) -> list[tuple[str, str, str]]:
    """(task id, variant label, source): one CUDA kernel, then portable fast and wrong ones (each CUDA
    kernel's first build takes 80-100 s on an H100 host, which a stream of minutes cannot absorb)."""
    suite = builtin_suite()
    cuda, fast, wrong = [], [], []
    for e in suite.entries:
        for v in suite.variants(e.task_id):
            if not v.runs_on(device):
                continue
            item = (e.task_id, f"{v.kind}_{v.devices}_{v.label}", v.path.read_text())
            (cuda if v.devices == "cuda" else fast if v.kind == "fast" else wrong).append(item)
    picked = cuda[:1]
    while len(picked) < n and (fast or wrong):
        for pool in (fast, wrong):
            if pool and len(picked) < n:
                picked.append(pool.pop(0))
    return picked


def scrape(port: int) -> tuple[str, Series]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    series: Series = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            series.setdefault(s.name, []).append((dict(s.labels), s.value))
    return text, series


def total(series: Series, name: str, **labels: str) -> float:
    return sum(v for lab, v in series.get(name, []) if all(lab.get(k) == w for k, w in labels.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("-n", type=int, default=30, help="candidates to stream")
    ap.add_argument("--time-limit", type=float, default=200.0, help="seconds for the stream")
    args = ap.parse_args()
    out = Path(args.out)
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    config, token, mport = host_config(out, args.device)
    cmd = systemd_command(config)
    (out / "command.txt").write_text(shlex.join(cmd) + "\n")
    print("daemon:", shlex.join(cmd), flush=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    log = open(out / "daemon.log", "w")  # noqa: SIM115 - closed at the end
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    checks: dict[str, Any] = {}
    try:
        port = wait_for_listening_port(proc, 180)
        if port is None:
            print("daemon did not start; see daemon.log", file=sys.stderr)
            return 2
        target = f"127.0.0.1:{port}"
        stop = threading.Event()
        busy_seen: list[float] = []
        scrapes = 0

        def scraper() -> None:
            nonlocal scrapes
            while not stop.is_set():
                try:
                    text, series = scrape(mport)
                    (out / "metrics" / f"{scrapes:04d}.prom").write_text(text)
                    scrapes += 1
                    busy_seen.append(total(series, "evalfarm_slots", state="busy"))
                except OSError:
                    pass
                stop.wait(1.0)

        t = threading.Thread(target=scraper, daemon=True)
        t.start()
        opts = {"num_correctness_inputs": 50, "timing_budget_s": 1.0}
        picked = candidates(args.n, args.device)
        results = []
        t0 = time.monotonic()
        with FarmClient([target], token=token, reverify=False, poll_interval_s=0.5,
                        default_deadline_s=args.time_limit) as farm:
            cap = farm.capacity()[target]
            ids = {farm.submit(task, src, options=opts, tags={"variant": label}): (task, label)
                   for task, label, src in picked}
            try:
                for res in farm.results(timeout=max(1.0, args.time_limit)):
                    results.append(res)
                    if time.monotonic() - t0 > args.time_limit:
                        break
            except TimeoutError:
                pass
        wall = time.monotonic() - t0
        stop.set()
        t.join(5)
        text, final = scrape(mport)
        (out / "metrics" / "final.prom").write_text(text)
        with open(out / "results.jsonl", "w") as f:
            for r in results:
                f.write(json.dumps({"sample_id": r.sample_id, "task": ids[r.sample_id][0],
                                    "variant": ids[r.sample_id][1], "verdict": r.verdict.value,
                                    "speedup": r.speedup, "gpu": r.gpu_name, "gpu_uuid": r.gpu_uuid,
                                    "slot": r.slot, "cached": r.cached}) + "\n")

        assert cap is not None
        slots = list(cap.slot_status)
        by_slot: Counter[str] = Counter()
        by_slot_verdict: Counter[tuple[str, str]] = Counter()
        uuid_of = {str(s.index): s.gpu_uuid for s in slots}
        for r in results:
            key = "cache" if r.cached else str(r.slot)
            by_slot[key] += 1
            by_slot_verdict[(key, r.verdict.value)] += 1
        checks["all_results"] = len(results) == len(picked)
        checks["result_gpu_uuid_matches_slot"] = all(r.cached or r.gpu_uuid == uuid_of.get(str(r.slot))
                                                     for r in results)
        checks["gpu_model_reported"] = bool(cap.gpu_model) and all(r.gpu_name == cap.gpu_model for r in results)
        for s in slots:
            sl, uuid = str(s.index), (s.gpu_uuid or "cpu")
            checks[f"slot{sl}_series_present"] = all(
                any(lab.get("slot") == sl and lab.get("gpu_uuid") == uuid for lab, _ in final.get(name, []))
                for name in ("evalfarm_slot_busy", "evalfarm_slot_in_service", "evalfarm_verdicts_total",
                             "evalfarm_slot_busy_seconds_total"))
            checks[f"slot{sl}_in_service"] = total(final, "evalfarm_slot_in_service", slot=sl) == 1.0
            checks[f"slot{sl}_verdicts_match_results"] = all(
                total(final, "evalfarm_verdicts_total", slot=sl, verdict=v) == by_slot_verdict[(sl, v)]
                for v in {v for (k, v) in by_slot_verdict if k == sl} | {"OK", "INCORRECT", "CUDA_FAULT"})
            checks[f"slot{sl}_queue_observations_match"] = (
                total(final, "evalfarm_phase_seconds_count", phase="queue", slot=sl) == by_slot[sl])
            checks[f"slot{sl}_busy_seconds_positive"] = (
                by_slot[sl] == 0 or total(final, "evalfarm_slot_busy_seconds_total", slot=sl) > 0)
        checks["cached_match"] = total(final, "evalfarm_verdicts_total", slot="cache") == by_slot["cache"]
        checks["slots_total_gauge"] = total(final, "evalfarm_slots", state="total") == len(slots)
        checks["busy_seen_while_streaming"] = max(busy_seen or [0.0]) >= 1.0
        checks["idle_after"] = total(final, "evalfarm_slots", state="busy") == 0.0
        checks["build_info"] = any(lab.get("mode") == args.device for lab, _ in final.get("evalfarm_build_info", []))
        checks["process_metrics"] = "process_resident_memory_bytes" in final
        checks["no_created_series"] = not any(n.endswith("_created") for n in final)
        checks["log_is_json"] = all(json.loads(line).get("ts", "").endswith("Z")
                                    for line in (out / "daemon.log").read_text().splitlines() if line.startswith("{"))
        verdicts = Counter(r.verdict.value for r in results)
        lines = [
            f"# operator check: {len(results)}/{len(picked)} results in {wall:.0f}s on {cap.gpu_model} "
            f"({len(slots)} slot(s)), {scrapes} scrapes",
            "",
            "| slot | gpu_uuid | results | verdicts (metrics) | busy s | in service |",
            "|---|---|---|---|---|---|",
        ]
        for s in slots:
            sl = str(s.index)
            vm = {v: int(total(final, "evalfarm_verdicts_total", slot=sl, verdict=v))
                  for v in sorted({lab["verdict"] for lab, _ in final["evalfarm_verdicts_total"]})}
            vm = {k: v for k, v in vm.items() if v}
            lines.append(f"| {sl} | {s.gpu_uuid or 'cpu'} | {by_slot[sl]} | {vm} | "
                         f"{total(final, 'evalfarm_slot_busy_seconds_total', slot=sl):.1f} | "
                         f"{int(total(final, 'evalfarm_slot_in_service', slot=sl))} |")
        lines += ["", f"verdicts from the client: {dict(verdicts)}", "",
                  "| check | ok |", "|---|---|"] + [f"| {k} | {'yes' if v else 'NO'} |" for k, v in checks.items()]
        table = "\n".join(lines)
        (out / "operator_check.md").write_text(table + "\n")
        (out / "checks.json").write_text(json.dumps(checks, indent=1))
        print(table)
        return 0 if all(checks.values()) else 1
    finally:
        if proc.poll() is None:
            proc.terminate()  # SIGTERM: the graceful drain the unit uses
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
