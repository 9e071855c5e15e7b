"""Score the adversarial suite's attack candidates with the static rules on and off; count what is paid.

    python scripts/attack_sweep.py --device cpu|cuda [--static on|off|both] [--out sweep.json]

Every runtime attack under tests/adversarial/runtime (and, on a GPU, tests/adversarial/gpu) is
scored against the task its test uses, with the options its test uses. An attack is *paid*
when it comes back OK with a speedup above its ceiling: what the honest work it does would earn
(1.0 for an attack that computes what the reference computes; where a task has an honest twin
of its attacks' own computation, ``HONEST_TWINS``, the twin is scored first in the same sweep and
its speedup is the ceiling when higher), plus a margin for timing noise (``--margin``, default
0.25 on CPU and 0.15 on a GPU). The last lines say, per static mode, how
many attacks were paid (the target is 0). Attacks whose effect lies outside the verdict (a file
removed, a child left running) are checked by their tests (``CHECKED_ELSEWHERE`` names them), not
here; this table is about reward. tests/adversarial/test_attack_sweep_coverage.py fails on an attack
file that is in neither list.
Exit status 1 when any attack is paid.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalfarm.build import BuildPool  # noqa: E402
from evalfarm.config import ScoreConfig  # noqa: E402
from evalfarm.judge import interpreter  # noqa: E402
from evalfarm.sandbox import bubblewrap  # noqa: E402
from evalfarm.scoring import as_candidate, as_task, score  # noqa: E402
from evalfarm.verdict import Verdict  # noqa: E402

ADV = ROOT / "tests" / "adversarial"
CHANNEL = "channel"
DATA = ROOT / "tests" / "data"


@dataclasses.dataclass(frozen=True)
class Attack:
    file: str                      # under tests/adversarial/
    task: str                      # a task file under tests/
    gpu_only: bool = False
    options: tuple[tuple[str, Any], ...] = ()
    replace: tuple[tuple[str, str], ...] = ()  # source edits a test makes (paths, ports)
    ceiling: float = 1.0           # what the honest part of the attack would earn


SCALE, TINY, ZERO, MATMUL, RELU = ("data/task_scale.py", "adversarial/runtime/task_tiny.py",
                                   "adversarial/runtime/task_zero_output.py",
                                   "adversarial/runtime/task_matmul_relu.py", "data/gpu/task_relu.py")
# The honest computation inside a task's attacks, scored in the same sweep: an attack earns its
# ceiling from it (e.g. on a GPU, three launches instead of the reference's five are faster).
HONEST_TWINS = {SCALE: "runtime/honest_scale_rewrite.py"}
ATTACKS = [
    Attack("runtime/cache_by_pointer.py", SCALE),
    Attack("runtime/read_ahead_arena.py", SCALE),
    Attack("runtime/late_switch.py", SCALE, options=(("audit_fraction", 0.5),)),
    Attack("runtime/early_exit.py", SCALE),
    Attack("runtime/fake_results_stdout.py", SCALE),
    Attack("runtime/persistent_output.py", SCALE),
    Attack("runtime/output_aliases_input.py", SCALE),
    Attack("runtime/tiny_constant.py", TINY, options=(("tolerance", "kernelbench"),)),
    Attack("runtime/memory_hog.py", SCALE, options=(("memory_limit_bytes", 4 << 30),)),
    Attack("runtime/network_connect.py", SCALE, replace=(("PORT = 0", "PORT = {port}"),)),
    Attack("runtime/shrunk_hyperparameter.py", SCALE),
    Attack("runtime/disk_filler.py", SCALE, options=(("file_size_limit_bytes", 16 << 20),)),
    Attack("runtime/forward_hook_steal_reference.py", SCALE),
    Attack("runtime/forward_hook_slow_reference.py", SCALE),
    Attack("runtime/forward_hook_work_in_reference.py", SCALE),
    Attack("runtime/zero_shortcut.py", ZERO),
    Attack("runtime/stale_matmul.py", MATMUL, replace=(('COUNT_PATH = ""', 'COUNT_PATH = "{channel}/reused"'),)),
    Attack("runtime/harness_clock_patch.py", SCALE),
    Attack("runtime/filesystem_remove.py", SCALE, replace=(('VICTIM = ""', 'VICTIM = "{tmp}/victim"'),)),
    Attack("runtime/warm_call_stash.py", SCALE, options=(("warm_call", True),)),
    Attack("runtime/block_aware_switch.py", SCALE),
    # against the timed blocks (evalfarm.judge.timed_blocks): work moved between a block's calls,
    # forged completion words, replies and progress reports for other rounds
    Attack("runtime/timed_block_defer.py", SCALE),
    Attack("runtime/timed_block_batch_ahead.py", SCALE),
    Attack("runtime/timed_block_forged_done.py", SCALE),
    Attack("runtime/block_reply_tamper.py", SCALE),
    Attack("runtime/block_progress_tamper.py", SCALE),
    # reduced precision inside the strict tolerance (the precision gate)
    Attack("runtime/tf32_emulated_matmul.py", "data/task_matmul_rand.py"),
    Attack("gpu/cuda_graph_replay.py", RELU, gpu_only=True),
    Attack("gpu/persisting_l2.py", RELU, gpu_only=True),
    Attack("gpu/persisting_l2.py", RELU, gpu_only=True, replace=(('WHEN = "forward"', 'WHEN = "init"'),)),
    Attack("gpu/lingering_work.py", RELU, gpu_only=True),
    Attack("gpu/spin_forever.py", RELU, gpu_only=True,
           options=(("first_call_timeout_s", 1.0), ("min_call_timeout_s", 1.0))),
    Attack("gpu/side_stream_cpp.py", RELU, gpu_only=True),
    Attack("gpu/tf32_matmul.py", "data/gpu/task_matmul_4096.py", gpu_only=True),
    Attack("gpu/bf16_matmul.py", "data/gpu/task_matmul_4096.py", gpu_only=True),
]
# Attack files whose effect lies outside the verdict, each checked by its own test (named here).
CHECKED_ELSEWHERE = {
    "runtime/arena_neighbour.py": "tests/adversarial/test_private_arenas.py",
    "runtime/escaped_child.py": "tests/adversarial/test_cgroup.py",
    "runtime/memory_spread.py": "tests/adversarial/test_cgroup.py",
    "runtime/scratch_filler.py": "tests/adversarial/test_runtime_attacks.py",
    "runtime/syscall_prober.py": "tests/adversarial/test_seccomp.py",
    "runtime/window_find_pairs.py": "tests/adversarial/test_task_windows.py",
    "runtime/window_leave_pairs.py": "tests/adversarial/test_task_windows.py",
}


def _source(a: Attack, tmp: str, port: int) -> str:
    src = (ADV / a.file).read_text()
    for old, new in a.replace:
        if old not in src:
            raise SystemExit(f"{a.file}: the text {old!r} to replace is not in the file")
        src = src.replace(old, new.format(tmp=tmp, port=port, channel=Path(tmp, CHANNEL)))
    return src


def _sweep(attacks: list[Attack], cfg: ScoreConfig, pool: BuildPool, static: str, margin: float,
           tmp: str, keep: Any) -> list[dict[str, Any]]:
    import evalfarm.scoring as scoring

    original = scoring.check_candidate_source
    if static == "off":
        scoring.check_candidate_source = lambda *a, **k: []
    rows = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    Path(tmp, "victim").write_text("kept")
    twins: dict[str, float] = {}
    try:
        for task_file in sorted({a.task for a in attacks} & set(HONEST_TWINS)):
            r = score(as_task(str(ROOT / "tests" / task_file)), as_candidate(str(ADV / HONEST_TWINS[task_file])),
                      cfg, build_pool=pool)
            if r.verdict is not Verdict.OK or r.speedup is None:
                raise SystemExit(f"the honest twin {HONEST_TWINS[task_file]} came back {r.verdict.value}: {r.detail[:300]}")
            twins[task_file] = r.speedup
            print(f"{'(honest twin) ' + HONEST_TWINS[task_file]:58s} {r.verdict.value:15s} {r.speedup:>7.2f}", flush=True)
        for a in attacks:
            task = as_task(str(ROOT / "tests" / a.task))
            r = score(task, as_candidate(_source(a, tmp, port)), cfg.replace(**dict(a.options)), build_pool=pool)
            ceiling = max(a.ceiling, twins.get(a.task, 0.0))
            paid = r.verdict is Verdict.OK and r.speedup is not None and r.speedup > ceiling + margin
            variant = [n for _, n in a.replace if "WHEN" in n]
            name = a.file + (f" [{variant[0]}]" if variant else "")
            row = {"attack": name, "task": a.task, "static": static, "verdict": r.verdict.value,
                   "speedup": r.speedup, "ceiling": ceiling, "paid": paid, "detail": (r.detail or "")[:600],
                   "raw_speedup": r.evidence.timing.raw_speedup if r.evidence.timing else None,
                   "exchange_excess_us": r.evidence.timing.exchange_excess_us if r.evidence.timing else None,
                   "exchange_charge_us": r.evidence.timing.exchange_charge_us if r.evidence.timing else None}
            rows.append(row)
            keep(row)
            sp = f"{r.speedup:.2f}" if r.speedup is not None else "-"
            excess = (f"  exchange excess {row['exchange_excess_us']:.0f} us, charged {row['exchange_charge_us']:.0f} us"
                      if row["exchange_excess_us"] else "")
            print(f"{name[:58]:58s} {row['verdict']:15s} {sp:>7s}  {'PAID' if paid else 'not paid'}{excess}", flush=True)
    finally:
        scoring.check_candidate_source = original
        listener.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--static", choices=("on", "off", "both"), default="both")
    ap.add_argument("--margin", type=float, default=None, help="timing-noise margin above each ceiling")
    ap.add_argument("--only", default="", help="substring of the attack file names to keep")
    ap.add_argument("--out", type=Path, help="write all rows as JSON here (rewritten after every attack)")
    ap.add_argument("--warm-call", choices=("auto", "on", "off"), default="auto",
                    help="ScoreConfig.warm_call (auto: on a CPU only); off on a CPU sends every timed call's "
                         "round with its go, as on a GPU (the worker prepared ahead)")
    args = ap.parse_args(argv)
    try:
        interpreter.require()  # every kernel would fail alike in judges that cannot import torch
    except interpreter.JudgeInterpreterError as err:
        print(f"{Path(__file__).name}: {err}", file=sys.stderr)
        return 2
    on_gpu = args.device != "cpu"
    margin = args.margin if args.margin is not None else (0.15 if on_gpu else 0.25)
    attacks = [a for a in ATTACKS if (on_gpu or not a.gpu_only) and args.only in a.file]
    cfg = ScoreConfig(device=args.device, num_correctness_inputs=40, timing_budget_s=1.0, min_timed_rounds=35,
                      reverify_above=0, warm_call={"auto": None, "on": True, "off": False}[args.warm_call])
    modes = ("on", "off") if args.static == "both" else (args.static,)
    all_rows: list[dict[str, Any]] = []
    summaries = []

    def keep(row: dict[str, Any]) -> None:
        """Every row as soon as it is measured: a sweep cut short by a time limit keeps what it did."""
        all_rows.append(row)
        if args.out:
            args.out.write_text(json.dumps(all_rows, indent=1))

    with tempfile.TemporaryDirectory(prefix="attack-sweep-") as tmp:
        os.chmod(tmp, 0o777)  # reachable by workers that drop to an unprivileged uid (run as root)
        # The one directory a candidate may write to (an attack's own report, e.g. stale_matmul's
        # count), as the tests' host channel opens it: mode 0777 and bound into bubblewrap
        # sandboxes. The victim file of filesystem_remove stays outside it.
        channel = Path(tmp, CHANNEL)
        channel.mkdir(mode=0o777)
        channel.chmod(0o777)
        os.environ[bubblewrap.SHARED_ENV] = str(channel)
        pool = BuildPool(max_workers=2, cache_dir=str(Path(tmp, "cache")))
        try:
            for mode in modes:
                print(f"== static rules {mode}, device {args.device}, {len(attacks)} attacks", flush=True)
                rows = _sweep(attacks, cfg, pool, mode, margin, tmp, keep)
                summaries.append(f"adversarial suite: {sum(r['paid'] for r in rows)}/{len(rows)} attacks paid "
                                 f"[static {mode}, device {args.device}; verdicts: "
                                 + ", ".join(f"{v} {sum(r['verdict'] == v for r in rows)}"
                                             for v in sorted({r['verdict'] for r in rows})) + "]")
        finally:
            pool.close()
    for line in summaries:
        print(line)
    return 1 if any(r["paid"] for r in all_rows) else 0


if __name__ == "__main__":
    sys.exit(main())
