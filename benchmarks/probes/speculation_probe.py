"""Does a process's speculation mitigation slow the host side of short calls? A side-by-side probe.

The farm's workers install a seccomp filter (evalfarm.sandbox.seccomp). On kernels whose
``spec_store_bypass_disable`` / ``spectre_v2_user`` default is ``seccomp``, a filter installed
without ``SECCOMP_FILTER_FLAG_SPEC_ALLOW`` also turns on Speculative Store Bypass Disable (and
STIBP/IBPB) for the process, which slows all of its CPU code, the launches of a GPU call included.
This probe runs the same work in fresh processes that differ only in that: nothing, the farm's
filter, the filter with SPEC_ALLOW, and SSBD / indirect-branch mitigation asked for by prctl. It
prints, per setting, what /proc/self/status says about the process's speculation state, a pure
Python loop's time, and (on a GPU) the median time of a short reference (eight elementwise
kernels) and candidate (one kernel) call timed as the worker times them, with their ratio.

    python benchmarks/probes/speculation_probe.py --reps 3 --calls 300 --numel 131072
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from cpu_speed_scan import loop_us  # the same fixed Python loop (scripts/ is this script's path)

SETTINGS = ("plain", "seccomp", "seccomp_spec_allow", "prctl_ssbd", "prctl_ib")
PR_SET_SPECULATION_CTRL = 53
PR_SPEC_STORE_BYPASS, PR_SPEC_INDIRECT_BRANCH = 0, 1
PR_SPEC_DISABLE = 1 << 2
SECCOMP_FILTER_FLAG_SPEC_ALLOW = 1 << 2


def apply(setting: str) -> str:
    """Put this process in ``setting``; what went wrong, or ""."""
    from evalfarm.sandbox import seccomp

    libc = ctypes.CDLL(None, use_errno=True)
    if setting == "seccomp":
        note = seccomp.install()
        return "" if note.startswith("seccomp filter") else note
    if setting == "seccomp_spec_allow":
        import platform

        code = seccomp.program(platform.machine())
        buf = ctypes.create_string_buffer(code, len(code))
        prog = seccomp._SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
        libc.prctl(seccomp.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        libc.syscall.restype = ctypes.c_long
        flags = seccomp.SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_SPEC_ALLOW
        rc = libc.syscall(ctypes.c_long(seccomp.ARCHES[platform.machine()][1]),
                          ctypes.c_long(seccomp.SECCOMP_SET_MODE_FILTER), ctypes.c_long(flags), ctypes.byref(prog))
        return "" if rc == 0 else os.strerror(ctypes.get_errno())
    if setting in ("prctl_ssbd", "prctl_ib"):
        which = PR_SPEC_STORE_BYPASS if setting == "prctl_ssbd" else PR_SPEC_INDIRECT_BRANCH
        rc = libc.prctl(PR_SET_SPECULATION_CTRL, which, PR_SPEC_DISABLE, 0, 0)
        return "" if rc == 0 else os.strerror(ctypes.get_errno())
    return ""


def speculation_state() -> str:
    try:
        with open("/proc/self/status") as f:
            return "; ".join(line.split(":", 1)[1].strip() for line in f if line.startswith("Speculation"))
    except OSError as err:
        return str(err)


def child(setting: str, calls: int, numel: int) -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    x = torch.randn(numel, device=dev)
    flush = torch.empty(100 << 20 if cuda else 1 << 20, dtype=torch.uint8, device=dev)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def ref(t: Any) -> Any:
        return 0.5 * t * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * torch.pow(t, 3.0))))

    def cand(t: Any) -> Any:
        return torch.nn.functional.gelu(t, approximate="tanh")

    for fn in (ref, cand):  # warm-up before the setting, as a worker loads before its filter
        fn(x)
    sync()
    why = apply(setting)
    row: dict[str, Any] = {"setting": setting, "failed": why, "speculation": speculation_state(),
                           "python_loop_us": loop_us(40)}
    times: dict[str, list[float]] = {"ref": [], "cand": [], "empty_sync": []}
    for k in range(calls):
        for name, fn in (("ref", ref), ("cand", cand)) if k % 2 else (("cand", cand), ("ref", ref)):
            time.sleep(0.0005)  # idle between calls, as a worker waiting for its next exchange
            flush.zero_()
            sync()
            t0 = time.perf_counter_ns()
            fn(x)
            sync()
            times[name].append((time.perf_counter_ns() - t0) / 1e3)
        t0 = time.perf_counter_ns()
        sync()
        times["empty_sync"].append((time.perf_counter_ns() - t0) / 1e3)
    for name, values in times.items():
        row[f"{name}_us"] = statistics.median(values)
    row["ratio"] = row["ref_us"] / row["cand_us"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--numel", type=int, default=64 * 2048)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.calls, args.numel)))
        return
    for path in ("spec_store_bypass", "spectre_v2", "spectre_v1", "mds", "retbleed"):
        try:
            with open(f"/sys/devices/system/cpu/vulnerabilities/{path}") as f:
                print(f"{path}: {f.read().strip()}")
        except OSError:
            pass
    print(f"kernel {os.uname().release}")
    rows = []
    for rep in range(args.reps):
        for setting in args.settings.split(","):
            out = subprocess.run([sys.executable, __file__, "--child", setting, "--calls", str(args.calls),
                                  "--numel", str(args.numel)], capture_output=True, text=True, timeout=300)
            if out.returncode:
                print(f"{setting}: exit {out.returncode}: {out.stderr[-2000:]}")
                continue
            row = json.loads(out.stdout.strip().splitlines()[-1])
            row["rep"] = rep
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{'setting':<20} {'py loop us':>10} {'ref us':>8} {'cand us':>8} {'ratio':>6} {'sync us':>8}  speculation")
    for row in rows:
        print(f"{row['setting']:<20} {row['python_loop_us']:>10.0f} {row['ref_us']:>8.1f} {row['cand_us']:>8.1f} "
              f"{row['ratio']:>6.2f} {row['empty_sync_us']:>8.1f}  {row['failed'] or row['speculation']}")


if __name__ == "__main__":
    main()
