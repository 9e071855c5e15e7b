"""An operator's fault drill: kill a worker, a judge and a whole daemon under a streaming client.

    python -m evalfarm.ops.drill --device cpu --candidates 12          # or --device cuda on a GPU host

Two local daemons (evalfarm.server.local, one slot each) share a private temp root and build
cache; one FarmClient streams a mix of built-in candidates (fast, wrong and identical variants,
each source unique) over both. While results arrive the drill SIGKILLs, in turn, a busy candidate
or reference worker, a busy judge, and then the second daemon itself (its whole process tree is
recorded first). Afterwards it checks what an operator relies on:

* every sample was answered exactly once (none lost, none twice), with the verdicts counted;
* no process of any daemon's tree is left (the killed daemon's judges and workers die with it);
* no run directory is left in the daemons' temp root once a fresh daemon has started there
  (a daemon's start sweeps the directories of a daemon that was killed).

It prints a table and writes ``drill.json`` and the daemons' logs to ``--out``; the exit code is 0 when every check passed, 1 when
one failed, 2 when the drill could not run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from evalfarm.bench_daemon import build_stream
from evalfarm.sandbox import lifetime
from evalfarm.sandbox.procfs import cmdline, stat_fields
from evalfarm.server.local import LocalDaemon, LocalDaemonError

log = logging.getLogger("evalfarm.ops.drill")

# Processes by their command line: a judge is started through its launcher.
JUDGE, WORKER = "evalfarm.judge.launch", "evalfarm.judge.worker"


def _cpu_ticks(pid: int) -> int:
    try:
        fields = stat_fields(pid)
        return int(fields[11]) + int(fields[12]) if fields is not None else -1
    except (IndexError, ValueError):
        return -1


def _parent(pid: int) -> int:
    try:
        fields = stat_fields(pid)
        return int(fields[1]) if fields is not None else 0
    except (IndexError, ValueError):
        return 0


def _judge_of(pid: int) -> int:
    """The judge above a process (a worker's; in a PID namespace the worker is two processes)."""
    for _ in range(6):
        if JUDGE.encode() in cmdline(pid):
            return pid
        pid = _parent(pid)
        if pid <= 1:
            break
    return 0


def _maps_arena(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "evalfarm-arena" in f.read()
    except OSError:
        return False


def alive(pid: int) -> bool:
    fields = stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


def busy_processes(daemon_pid: int, module: str, window_s: float = 0.5) -> list[int]:
    """Processes of ``module`` below the daemon that are serving an evaluation: their arenas are
    mapped (CPU), or they used CPU time within ``window_s``. A judge started ahead and waiting for
    its request (evalfarm.judge.standby) is neither, so the drill hits work in flight."""
    pids = [p for p in lifetime.descendants(daemon_pid) if module.encode() in cmdline(p)]
    before = {p: _cpu_ticks(p) for p in pids}
    time.sleep(window_s)
    return [p for p in pids if alive(p) and (_maps_arena(p) or _cpu_ticks(p) > before[p] >= 0)]


class Faults(threading.Thread):
    """Fires the faults in order, each once ``answered()`` reaches its threshold."""

    def __init__(self, daemons: list[LocalDaemon], answered: Any, total: int, wait_s: float) -> None:
        super().__init__(name="drill-faults", daemon=True)
        self.daemons, self.answered, self.wait_s = daemons, answered, wait_s
        self.plan = [("kill a busy worker", 1, self._kill_busy, WORKER),
                     ("kill a busy judge", max(2, total // 3), self._kill_busy, JUDGE),
                     ("kill daemon 1", max(3, total // 2), self._kill_daemon, None)]
        self.report: list[dict[str, Any]] = []
        self.killed_tree: list[int] = []
        self._hit_judges: set[int] = set()  # each fault hits a different evaluation
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        for name, threshold, action, arg in self.plan:
            while self.answered() < threshold and not self._halt.wait(0.2):
                pass
            if self._halt.is_set():
                self.report.append({"fault": name, "done": False, "detail": "the stream ended first"})
                continue
            detail = action(arg)
            self.report.append({"fault": name, "done": not detail.startswith("no "), "detail": detail,
                                "after_answers": self.answered()})
            log.info("fault: %s: %s", name, detail)

    def _kill_busy(self, module: str) -> str:
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline and not self._halt.is_set():
            for i, d in enumerate(self.daemons[:1] if module == WORKER else self.daemons):
                if d.proc.poll() is not None:
                    continue
                pids = [p for p in busy_processes(d.pid, module) if _judge_of(p) not in self._hit_judges]
                if pids:
                    self._hit_judges.add(_judge_of(pids[0]))
                    os.kill(pids[0], signal.SIGKILL)
                    return f"SIGKILL pid {pids[0]} ({module.rsplit('.', 1)[1]} of daemon {i})"
        return f"no busy {module.rsplit('.', 1)[1]} found within {self.wait_s:.0f} s"

    def _kill_daemon(self, _arg: Any) -> str:
        d = self.daemons[1]
        self.killed_tree = [d.pid, *lifetime.descendants(d.pid)]
        os.kill(d.pid, signal.SIGKILL)  # the daemon alone: its judges and workers must die with it
        d.proc.wait(10)
        return f"SIGKILL daemon pid {d.pid} ({len(self.killed_tree) - 1} processes below it)"


def run_drill(args: argparse.Namespace) -> dict[str, Any]:
    from evalfarm.client.sync import FarmClient

    work = Path(tempfile.mkdtemp(prefix="evalfarm-drill-"))
    os.chmod(work, 0o711)  # a worker that drops to an unprivileged uid traverses it to its own directory
    tmp_root = work / "tmp"
    tmp_root.mkdir()
    os.chmod(tmp_root, 0o711)
    env = dict(os.environ, TMPDIR=str(tmp_root))
    extra = ["--warm-judges", str(args.warm_judges)] if args.warm_judges is not None else []
    device = "cuda" if args.device.startswith("cuda") else "cpu"
    daemons: list[LocalDaemon] = []
    checks: dict[str, Any] = {}
    try:
        for i in range(2):
            daemons.append(LocalDaemon(device=device, cache_dir=work / "cache", log_path=work / f"daemon-{i}.log",
                                       args=extra, env=env, start_timeout_s=180.0,
                                       allow_weak_sandbox=args.allow_weak_sandbox))
        trees = {d.pid: set(lifetime.descendants(d.pid)) for d in daemons}
        options = {"num_correctness_inputs": args.inputs or (1000 if device == "cuda" else 20),
                   "timing_budget_s": args.budget or (10.0 if device == "cuda" else 0.5)}
        if device == "cpu":
            options["size_profile"] = "small"
        stream = build_stream(device, args.candidates, args.group)
        if args.no_builds:  # only candidates that compile nothing: the drill is about processes
            from evalfarm.build.hook import uses_inline_extensions

            stream = [it for it in build_stream(device, 8 * args.candidates, args.group)
                      if not uses_inline_extensions(it.source)][:args.candidates]
        client = FarmClient([d.endpoint for d in daemons], default_deadline_s=args.timeout)
        sent: dict[str, str] = {}
        for i, item in enumerate(stream):
            sent[client.submit(item.task, item.source, f"drill-{i}", options=options)] = item.kind
        answers: Counter[str] = Counter()
        verdicts: Counter[str] = Counter()
        faults = Faults(daemons, lambda: sum(answers.values()), len(stream), args.fault_wait)
        faults.start()
        t0 = time.monotonic()
        try:
            for res in client.results(timeout=args.timeout):
                answers[res.sample_id] += 1
                verdicts[res.verdict.value] += 1
                for d in daemons:  # every process seen below a daemon, to check at the end
                    if d.proc.poll() is None:
                        trees[d.pid] |= set(lifetime.descendants(d.pid))
        finally:
            faults.stop()
            faults.join(30)
            client.close(timeout=5.0)
        wall = time.monotonic() - t0
        missing = sorted(set(sent) - set(answers))
        twice = sorted(s for s, n in answers.items() if n > 1)
        checks["every sample answered once"] = not missing and not twice
        checks["faults fired"] = all(f["done"] for f in faults.report) and len(faults.report) == 3
        deadline = time.monotonic() + 15
        while any(alive(p) for p in faults.killed_tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        left_killed = [p for p in faults.killed_tree if alive(p)]
        checks["killed daemon's processes gone"] = not left_killed
        for d in daemons:
            d.stop()
        deadline = time.monotonic() + 15
        every = set().union(*trees.values())
        while any(alive(p) for p in every) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = sorted(p for p in every if alive(p))
        checks["no process left"] = not left
        with LocalDaemon(device="cpu", cache_dir=work / "cache", log_path=work / "sweeper.log", env=env,
                         args=["--warm-judges", "0"], allow_weak_sandbox=args.allow_weak_sandbox):
            pass  # its start sweeps the run directories of the daemon that was killed
        runs_left = sorted(n for n in os.listdir(tmp_root) if n.startswith(lifetime.PREFIX))
        checks["no run directory left"] = not runs_left
        args.out.mkdir(parents=True, exist_ok=True)
        for log_file in work.glob("*.log"):
            shutil.copyfile(log_file, args.out / log_file.name)
        return {"device": device, "candidates": len(stream), "wall_s": round(wall, 1),
                "answered": sum(answers.values()), "missing": missing, "answered_twice": twice,
                "verdicts": dict(verdicts), "faults": faults.report, "processes_left": left,
                "killed_daemon_processes_left": left_killed, "run_dirs_left": runs_left,
                "checks": checks}
    finally:
        for d in daemons:
            if d.proc.poll() is None:
                d.kill()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (every GPU of the host, in each daemon)")
    ap.add_argument("--candidates", type=int, default=12, help="samples in the stream (at least 6)")
    ap.add_argument("--group", type=int, default=3, help="candidates per task in a row")
    ap.add_argument("--inputs", type=int, default=None, help="correctness inputs (default: 1000 on cuda, 20 on cpu)")
    ap.add_argument("--budget", type=float, default=None, help="timing budget s (default: 10 on cuda, 0.5 on cpu)")
    ap.add_argument("--warm-judges", type=int, default=None, help="the daemons' --warm-judges (default: theirs)")
    ap.add_argument("--no-builds", action="store_true", help="leave out candidates that compile an extension")
    ap.add_argument("--fault-wait", type=float, default=120.0, help="seconds to wait for a busy process to kill")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for any one result")
    ap.add_argument("--out", type=Path, default=Path("drill"), help="directory for drill.json and the daemons' logs")
    ap.add_argument("--allow-weak-sandbox", action="store_true",
                    help="start the daemons even where this host has no strong sandbox (they say so); "
                         "without it such a host cannot run the drill (exit 2)")
    args = ap.parse_args(argv)
    if args.candidates < 6:
        ap.error("--candidates must be at least 6 (three faults need work in flight)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        report = run_drill(args)
    except LocalDaemonError as err:
        print(f"evalfarm drill: {err}", file=sys.stderr)
        return 2
    (args.out / "drill.json").write_text(json.dumps(report, indent=1))
    print(f"\nfault drill ({report['device']}, {report['candidates']} samples over 2 daemons, {report['wall_s']} s)")
    for f in report["faults"]:
        print(f"  {f['fault']:<20} {f['detail']}")
    print("  verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(report["verdicts"].items())))
    for name, ok in report["checks"].items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
