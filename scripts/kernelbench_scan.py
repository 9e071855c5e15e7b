"""Scan a KernelBench checkout: load every task, plan its memory, time its reference, lint it.

    python scripts/kernelbench_scan.py --root KernelBench-checkout --device cuda \
        --levels 1,2,3 --task-timeout 20 --total-timeout 300 --out scan.jsonl --summary scan.md

Each task runs in its own child process (``evalfarm.tasks.lint.lint_task``) killed after
``--task-timeout`` seconds, so one slow or hanging task cannot stall the scan; tasks not reached
within ``--total-timeout`` are listed as skipped. Writes one JSON line per task and a Markdown
summary (how many load, fit the device, are degenerate; reference times by level).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _lint_child(root: str, task_id: str, device: str, conn) -> None:  # noqa: ANN001
    from evalfarm.tasks.lint import lint_task
    from evalfarm.tasks.suite import kernelbench_suite

    try:
        conn.send(lint_task(kernelbench_suite(root).load(task_id), device, "default").to_dict())
    except Exception as err:  # noqa: BLE001
        conn.send({"loaded": False, "error": f"{type(err).__name__}: {err}", "ok": False})


def scan_one(root: str, task_id: str, device: str, timeout_s: float) -> dict:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_lint_child, args=(root, task_id, device, child), daemon=True)
    t0 = time.monotonic()
    proc.start()
    child.close()
    row: dict = {"loaded": False, "ok": False, "error": f"timed out after {timeout_s:g} s"}
    if parent.poll(timeout_s):
        try:
            row = parent.recv()
        except EOFError:
            row = {"loaded": False, "ok": False, "error": f"the child process died (code {proc.exitcode})"}
    if proc.is_alive():
        proc.kill()
    proc.join(5)
    row["scan_s"] = round(time.monotonic() - t0, 2)
    return row


def summarise(rows: list[dict]) -> str:
    lines = ["| level | tasks | load | fit | too large | degenerate | timed out / failed | reference ms (median, max) |",
             "|---|---|---|---|---|---|---|---|"]
    for level in sorted({r["level"] for r in rows}):
        rs = [r for r in rows if r["level"] == level]
        loaded = [r for r in rs if r.get("loaded")]
        fits = [r for r in loaded if r.get("fits") is not False]
        big = [r for r in loaded if r.get("fits") is False]
        degen = [r for r in loaded if r.get("degenerate")]
        ms = [r["ref_ms"] for r in loaded if isinstance(r.get("ref_ms"), int | float)]
        t = f"{statistics.median(ms):.2f}, {max(ms):.2f}" if ms else "-"
        lines.append(f"| {level} | {len(rs)} | {len(loaded)} | {len(fits)} | {len(big)} | {len(degen)} | "
                     f"{len(rs) - len(loaded)} | {t} |")
    notes = [f"- {r['id']} {r.get('name', '')}: " + (r.get("degenerate") or str(r.get("error", "")).splitlines()[0][:200])
             for r in rows if not r.get("ok")]
    return "\n".join(lines) + ("\n\nNot ok:\n" + "\n".join(notes) if notes else "") + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--root", required=True, help="KernelBench checkout (KernelBench/level*/ or level*/)")
    ap.add_argument("--device", default="cuda", help="cpu, cuda or cuda:N")
    ap.add_argument("--levels", default="1,2,3", help="comma list of levels")
    ap.add_argument("--task-timeout", type=float, default=20.0, help="seconds per task (load, plan, time, lint)")
    ap.add_argument("--total-timeout", type=float, default=300.0, help="seconds for the whole scan")
    ap.add_argument("--out", default="scan.jsonl", help="one JSON line per task")
    ap.add_argument("--summary", default="scan.md", help="Markdown summary")
    args = ap.parse_args()
    from tqdm import tqdm

    from evalfarm.tasks.suite import kernelbench_suite

    levels = {int(x) for x in args.levels.split(",") if x.strip()}
    entries = [e for e in kernelbench_suite(args.root).entries if e.level in levels]
    end = time.monotonic() + args.total_timeout
    rows = []
    with open(args.out, "w") as f:
        for e in tqdm(entries, desc="scanning", unit="task"):
            left = end - time.monotonic()
            if left <= 1:
                row = {"loaded": False, "ok": False, "error": "skipped: --total-timeout reached"}
            else:
                row = scan_one(args.root, e.task_id, args.device, min(args.task_timeout, left))
            row.update({"id": e.task_id, "name": e.name, "level": e.level})
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
    text = summarise(rows)
    Path(args.summary).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
