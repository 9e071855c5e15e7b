"""Scan a KernelBench checkout: load every task, plan its memory, time its reference, lint it.

    python scripts/kernelbench_scan.py --root KernelBench-checkout --device cuda \
        --levels 1,2,3 --task-timeout 20 --total-timeout 300 --out scan.jsonl --summary scan.md

One long-lived child process lints task after task (``evalfarm.tasks.lint.lint_task``), so the
interpreter, torch and the CUDA context start once, not per task. A task that takes longer than
``--task-timeout`` seconds gets its child killed, and the next task runs in a fresh one; so does
the task after one that killed its child or left its CUDA context unusable. Tasks not reached
within ``--total-timeout`` are written as not scanned (``"scanned": false``), and ``--resume``
scans only those and the tasks not in the output yet, so a scan can be split over several runs
(``--levels 1``, then ``--levels 2,3 --resume``). Writes one JSON line per task and a Markdown
summary (how many load, fit the device, are degenerate, failed, were not scanned; reference
times by level).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

log = logging.getLogger("kernelbench_scan")
GB = 1e9
START_TIMEOUT_S = 120.0  # a child's interpreter, torch import and CUDA context (not charged to a task)


def _usable(device: str) -> bool:
    """Whether this process can still run work on ``device`` (a sticky CUDA error ends that)."""
    import torch

    if not device.startswith("cuda"):
        return True
    try:
        torch.zeros(1, device=device).add_(1).item()
        torch.cuda.synchronize(device)
        return True
    except Exception:  # noqa: BLE001 - any failure means a fresh process is needed
        return False


def _child(conn: Any, device: str, memory: tuple[int, int] | None) -> None:
    """The child's loop: (root, task id) in, one lint row out, until told to stop."""
    import torch

    from evalfarm.tasks.lint import lint_task
    from evalfarm.tasks.suite import kernelbench_suite

    if device.startswith("cuda"):
        torch.zeros(1, device=device)  # the context now, outside any task's time
    conn.send({"op": "ready"})
    suites: dict[str, Any] = {}
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        root, task_id = msg
        try:
            suite = suites.setdefault(root, kernelbench_suite(root))
            row = lint_task(suite.load(task_id), device, "default", memory=memory).to_dict()
        except Exception as err:  # noqa: BLE001
            row = {"loaded": False, "ok": False, "error": f"{type(err).__name__}: {err}"}
        usable = _usable(device)
        if not usable:
            row["error"] = (row.get("error") or "") + "\nthe device is unusable in this process after this task"
        conn.send(row)
        if not usable:
            return


class LintProcess:
    """A child process that lints tasks one after another; restarted after a timeout or a death."""

    def __init__(self, device: str, memory: tuple[int, int] | None = None) -> None:
        self.device = device
        self.memory = memory
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self, timeout_s: float) -> str:
        """Start a child; "" when it is ready, else why not."""
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_child, args=(child, self.device, self.memory), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        self.starts += 1
        try:
            if parent.poll(timeout_s) and parent.recv().get("op") == "ready":
                return ""
        except EOFError:
            pass
        self.kill()
        return f"the scan's child process did not start within {timeout_s:g} s"

    def lint(self, root: str, task_id: str, timeout_s: float, start_timeout_s: float = START_TIMEOUT_S) -> dict:
        """One task's lint row; the child is killed when it takes longer than ``timeout_s``."""
        if self._proc is None or not self._proc.is_alive():
            why = self._start(start_timeout_s)
            if why:
                return {"loaded": False, "ok": False, "error": why}
        pid = self.pid
        try:
            self._conn.send((root, task_id))
            if not self._conn.poll(timeout_s):
                self.kill()
                return {"loaded": False, "ok": False, "error": f"timed out after {timeout_s:g} s", "worker": pid}
            row = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._proc.join(5)
            code = self._proc.exitcode
            self.kill()
            return {"loaded": False, "ok": False, "error": f"the child process died (exit code {code})", "worker": pid}
        row["worker"] = pid
        return row

    def kill(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(10)
            except (BrokenPipeError, OSError):
                pass
        self.kill()


def first_line(text: Any, limit: int = 200) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0][:limit] if lines else ""


def why_not_ok(r: dict) -> str:
    if r.get("degenerate"):
        return str(r["degenerate"])
    if r.get("error"):
        return first_line(r["error"])
    if r.get("fits") is False:
        return (f"does not fit: needs ~{(r.get('need_bytes') or 0) / GB:.1f} GB, "
                f"{(r.get('free_bytes') or 0) / GB:.1f} GB free")
    return "not ok"


def summarise(rows: list[dict]) -> str:
    """The Markdown summary: per level, tasks that load, fit, are too large or degenerate, failed
    (timed out, died, did not load) and were not scanned (the total timeout came first)."""
    lines = ["| level | tasks | load | fit | too large | degenerate | failed | not scanned | reference ms (median, max) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for level in sorted({r["level"] for r in rows}):
        rs = [r for r in rows if r["level"] == level]
        scanned = [r for r in rs if r.get("scanned", True)]
        loaded = [r for r in scanned if r.get("loaded")]
        fits = [r for r in loaded if r.get("fits") is not False]
        big = [r for r in loaded if r.get("fits") is False]
        degen = [r for r in loaded if r.get("degenerate")]
        ms = [r["ref_ms"] for r in loaded if isinstance(r.get("ref_ms"), int | float)]
        t = f"{statistics.median(ms):.2f}, {max(ms):.2f}" if ms else "-"
        lines.append(f"| {level} | {len(rs)} | {len(loaded)} | {len(fits)} | {len(big)} | {len(degen)} | "
                     f"{len(scanned) - len(loaded)} | {len(rs) - len(scanned)} | {t} |")
    notes = [f"- {r['id']} {r.get('name', '')}: {why_not_ok(r)}"
             for r in rows if r.get("scanned", True) and not r.get("ok")]
    text = "\n".join(lines) + "\n"
    if notes:
        text += "\nNot ok:\n" + "\n".join(notes) + "\n"
    return text


def read_rows(path: Path) -> dict[str, dict]:
    """The latest row of each task id in an existing scan output (a torn last line is skipped)."""
    rows: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "id" in row:
                rows[row["id"]] = row
    return rows


def scan(root: str, entries: list[Any], device: str, out: Path, task_timeout_s: float, total_timeout_s: float,
         resume: bool = False, memory: tuple[int, int] | None = None) -> list[dict]:
    """Lint ``entries`` (suite entries) into ``out``; returns every row of ``out`` for these entries."""
    from tqdm import tqdm

    done = read_rows(out) if resume else {}
    todo = [e for e in entries if done.get(e.task_id, {}).get("scanned", False) is not True]
    if resume:
        log.info("resuming: %d of %d tasks already scanned in %s", len(entries) - len(todo), len(entries), out)
    end = time.monotonic() + total_timeout_s
    child = LintProcess(device, memory)
    counts = {"ok": 0, "not ok": 0, "failed": 0}
    try:
        with open(out, "a" if resume else "w") as f, tqdm(todo, desc="scanning", unit="task", file=sys.stderr) as bar:
            for e in bar:
                left = end - time.monotonic()
                t0 = time.monotonic()
                if left <= 1:
                    row = {"scanned": False, "loaded": False, "ok": False, "error": "not scanned: --total-timeout reached"}
                else:
                    row = child.lint(root, e.task_id, min(task_timeout_s, left), min(START_TIMEOUT_S, left))
                    row["scanned"] = True
                    row["scan_s"] = round(time.monotonic() - t0, 2)
                    counts["ok" if row.get("ok") else "not ok" if row.get("loaded") else "failed"] += 1
                    bar.set_postfix(counts, refresh=False)
                    ms = row.get("ref_ms")
                    bar.write(f"{e.task_id:>6} {'ok' if row.get('ok') else why_not_ok(row)[:90]}"
                              f"{f' ref {ms:.2f} ms' if isinstance(ms, int | float) else ''} ({row['scan_s']:.1f} s)",
                              file=sys.stderr)
                row.update({"id": e.task_id, "name": e.name, "level": e.level})
                done[e.task_id] = row
                f.write(json.dumps(row) + "\n")
                f.flush()
    finally:
        child.close()
    log.info("%d child process start(s) for %d tasks", child.starts, len(todo))
    return [done[e.task_id] for e in entries if e.task_id in done]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--root", required=True, help="KernelBench checkout (KernelBench/level*/ or level*/)")
    ap.add_argument("--device", default="cuda", help="cpu, cuda or cuda:N")
    ap.add_argument("--levels", default="1,2,3", help="comma list of levels")
    ap.add_argument("--task-timeout", type=float, default=20.0,
                    help="seconds per task (load, plan, time, lint; the child's start-up is not counted)")
    ap.add_argument("--total-timeout", type=float, default=300.0, help="seconds for the whole scan")
    ap.add_argument("--out", default="scan.jsonl", help="one JSON line per task")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows already in --out and scan only the tasks without one (or not scanned)")
    ap.add_argument("--free-gb", type=float, default=None,
                    help="plan against this much free device memory (GB) instead of the device's own "
                         "(e.g. on CPU: would the tasks fit an 80 GB card?); tasks that do not fit are not run")
    ap.add_argument("--summary", default="scan.md", help="Markdown summary (of every row in --out for --levels)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from evalfarm.tasks.suite import kernelbench_suite

    levels = {int(x) for x in args.levels.split(",") if x.strip()}
    entries = [e for e in kernelbench_suite(args.root).entries if e.level in levels]
    memory = (int(args.free_gb * GB), int(args.free_gb * GB)) if args.free_gb is not None else None
    rows = scan(args.root, entries, args.device, Path(args.out), args.task_timeout, args.total_timeout,
                resume=args.resume, memory=memory)
    text = summarise(rows)
    Path(args.summary).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
