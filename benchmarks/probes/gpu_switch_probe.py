"""Where does a two-process timing protocol lose time? A side-by-side probe on one GPU.

Times the same two small models (a reference made of eight elementwise kernels, a candidate of
one) under protocols that add, one at a time, what the judge's two-worker protocol does around
each call: a pipe round trip per call, a second process, the judge writing the inputs through
its own CUDA context, SIGSTOP/SIGCONT of the idle worker, and candidate mitigations (an untimed
warm-up call on stale inputs before the inputs are written), and each process pinned to a
core of its own (the "pinned" rows). Prints one row per protocol:
median reference and candidate call times and their ratio.

    python benchmarks/probes/gpu_switch_probe.py --rounds 400 --numel 1048576
    python benchmarks/probes/gpu_switch_probe.py --rounds 300 --numel 131072 --only "GPU busy,full protocol"
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import signal
import statistics
import time
from typing import Any

import torch

FLUSH_BYTES = 2 * 50 * 1024 * 1024


def ref_fn(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def cand_fn(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x, approximate="tanh")


FNS = {"ref": ref_fn, "cand": cand_fn}


def sm_clock() -> float:
    """The SM clock (MHz) now, from NVML; NaN where NVML is missing."""
    global _NVML
    try:
        import pynvml

        if _NVML is None:
            pynvml.nvmlInit()
            _NVML = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return float(pynvml.nvmlDeviceGetClockInfo(_NVML, pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001
        return float("nan")


_NVML: Any = None
_CALLS = [0]


def timed(fn: Any, x: torch.Tensor, flush: torch.Tensor, nudge: int = 0, busy_us: int = 0) -> tuple[int, float, float]:
    """(wall ns, event us, SM MHz after every 8th call) of one call after an L2 flush, as the worker times it."""
    if busy_us:  # keep the GPU busy right before the call, as a clock warm-up
        torch.cuda._sleep(int(busy_us * 1.98e3))
    flush.zero_()
    torch.cuda.synchronize()
    for _ in range(nudge):  # tiny kernels right before the call, each synchronised
        NUDGE.add_(1)
        torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    t0 = time.perf_counter_ns()
    fn(x)
    e1.record()
    torch.cuda.synchronize()
    t = time.perf_counter_ns() - t0
    _CALLS[0] += 1
    return t, e0.elapsed_time(e1) * 1e3, sm_clock() if _CALLS[0] % 8 == 0 else float("nan")


NUDGE: Any = None


def pin_to(core: int | None) -> None:
    """Run this process on one core only (None: leave it), so nothing else evicts its caches."""
    if core is not None:
        os.sched_setaffinity(0, {core})


def worker(role: str, conn: Any, handle: Any, numel: int, core: int | None = None) -> None:
    pin_to(core)
    torch.cuda.set_device(0)
    rebuild, args = handle
    arena = rebuild(*args)
    x = arena[:numel]
    stale = torch.randn(numel, device="cuda")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    fn = FNS[role]
    global NUDGE
    NUDGE = torch.zeros(1, device="cuda")
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg[0] == "prep":
            for _ in range(msg[1]):  # untimed warm-up calls on stale inputs
                fn(stale)
            torch.cuda.synchronize()
            conn.send("ok")
        elif msg[0] == "go":
            conn.send(timed(fn, x, flush, msg[1], msg[2]))
        else:
            break


def spin_worker(role: str, flag: Any, result: Any, handle: Any, numel: int) -> None:
    """A worker that waits for its turn by spinning on a shared flag instead of sleeping in a read."""
    torch.cuda.set_device(0)
    rebuild, args = handle
    arena = rebuild(*args)
    x = arena[:numel]
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    fn = FNS[role]
    global NUDGE
    NUDGE = torch.zeros(1, device="cuda")
    flag.value = 1  # ready
    seen = 1
    while True:
        while flag.value == seen:
            pass
        seen = flag.value
        if seen < 0:
            return
        t, e, c = timed(fn, x, flush)
        result[0], result[1], result[2] = t, e, c
        seen += 1
        flag.value = seen


def two_process_spin(rounds: int, numel: int, write: bool) -> dict[str, list[Any]]:
    from torch.multiprocessing.reductions import reduce_tensor

    ctx = mp.get_context("spawn")
    arenas, procs, flags, results = {}, {}, {}, {}
    for role in ("ref", "cand"):
        arenas[role] = torch.zeros(numel, device="cuda")
        flags[role] = ctx.Value("q", 0, lock=False)
        results[role] = ctx.Array("d", 3, lock=False)
        p = ctx.Process(target=spin_worker, args=(role, flags[role], results[role], reduce_tensor(arenas[role]),
                                                  numel), daemon=True)
        p.start()
        procs[role] = p
    for role in flags:
        while flags[role].value != 1:
            time.sleep(0.01)
    src = torch.empty(numel, device="cuda")
    out: dict[str, list[Any]] = {"ref": [], "cand": []}
    try:
        for r in range(rounds):
            src.normal_()
            torch.cuda.synchronize()
            for role in (("ref", "cand") if r % 2 else ("cand", "ref")):
                if write:
                    arenas[role].copy_(src)
                    torch.cuda.synchronize()
                go = flags[role].value + 1
                flags[role].value = go
                while flags[role].value == go:
                    pass
                res = results[role]
                out[role].append((int(res[0]), float(res[1]), float(res[2])))
    finally:
        for role, p in procs.items():
            flags[role].value = -1
            p.join(5)
    return out


def idle_context(conn: Any) -> None:
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    conn.send("ready")
    conn.recv()


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def inproc(rounds: int, numel: int, sleep_s: float = 0.0, idle_procs: int = 0,
           busy_us: int = 0, spin_s: float = 0.0, spin_after_s: float = 0.0) -> dict[str, list[Any]]:
    global NUDGE
    NUDGE = torch.zeros(1, device="cuda")
    ctx = mp.get_context("spawn")
    idle = []
    for _ in range(idle_procs):  # processes that hold a CUDA context and do nothing
        parent, child = ctx.Pipe()
        p = ctx.Process(target=idle_context, args=(child,), daemon=True)
        p.start()
        assert parent.recv() == "ready"
        idle.append((p, parent))
    x = torch.empty(numel, device="cuda")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    out: dict[str, list[Any]] = {"ref": [], "cand": []}
    for r in range(rounds):
        x.normal_()
        order = ("ref", "cand") if r % 2 else ("cand", "ref")
        for role in order:
            if sleep_s:
                time.sleep(sleep_s)
            if spin_s:
                spin(spin_s)
            if spin_after_s:
                spin(spin_after_s)
            out[role].append(timed(FNS[role], x, flush, busy_us=busy_us))
    for p, conn in idle:
        conn.send("quit")
        p.join(5)
    return out


def two_process(rounds: int, numel: int, write: bool, stop: bool, warm: int, nudge: int = 0,
                busy_us: int = 0, cores: tuple[int, int] | None = None) -> dict[str, list[Any]]:
    from torch.multiprocessing.reductions import reduce_tensor

    ctx = mp.get_context("spawn")
    arenas, procs, conns = {}, {}, {}
    for i, role in enumerate(("ref", "cand")):
        arenas[role] = torch.zeros(numel, device="cuda")
        parent, child = ctx.Pipe()
        p = ctx.Process(target=worker, args=(role, child, reduce_tensor(arenas[role]), numel,
                                             cores[i] if cores else None), daemon=True)
        p.start()
        procs[role], conns[role] = p, parent
    for role in conns:
        assert conns[role].recv() == "ready"
    src = torch.empty(numel, device="cuda")
    out: dict[str, list[Any]] = {"ref": [], "cand": []}
    try:
        for r in range(rounds):
            src.normal_()
            torch.cuda.synchronize()
            for role in (("ref", "cand") if r % 2 else ("cand", "ref")):
                pid = procs[role].pid
                if stop:
                    os.kill(pid, signal.SIGCONT)
                conns[role].send(("prep", warm))
                assert conns[role].recv() == "ok"
                if stop:
                    os.kill(pid, signal.SIGSTOP)
                if write:
                    arenas[role].copy_(src)
                    torch.cuda.synchronize()
                if stop:
                    os.kill(pid, signal.SIGCONT)
                conns[role].send(("go", nudge, busy_us))
                t = conns[role].recv()
                if stop:
                    os.kill(pid, signal.SIGSTOP)
                out[role].append(t)
    finally:
        for role, p in procs.items():
            os.kill(p.pid, signal.SIGCONT)
            conns[role].send(("quit",))
            p.join(5)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--numel", type=int, default=1 << 20)
    ap.add_argument("--only", default="", help="run the protocols whose names contain one of these "
                    "comma-separated substrings (the in-process rows always run, as the baseline)")
    args = ap.parse_args()
    torch.cuda.init()
    n, k = args.rounds, args.numel
    allowed = sorted(os.sched_getaffinity(0))
    # Pinned rows: the judge (this process) on one core, each worker on a core of its own, so
    # between its calls nothing else runs where a worker's code and data sit in L1/L2.
    pinned = (allowed[1], allowed[2]) if len(allowed) >= 3 else None

    def pinned_judge(run: Any) -> Any:
        def go() -> Any:
            os.sched_setaffinity(0, {allowed[0]})
            try:
                return run()
            finally:
                os.sched_setaffinity(0, set(allowed))
        return go

    protocols: list[tuple[str, Any]] = [
        ("in-process (old farm)", lambda: inproc(n, k)),
        ("in-process, sleep 1 ms", lambda: inproc(n, k, sleep_s=1e-3)),
        ("in-process, sleep 1 ms, pinned", pinned_judge(lambda: inproc(n, k, sleep_s=1e-3))),
        ("in-process, spin 1 ms", lambda: inproc(n, k, spin_s=1e-3)),
        ("in-process, sleep 1 ms + spin 200 us", lambda: inproc(n, k, sleep_s=1e-3, spin_after_s=2e-4)),
        # The GPU's clock drops while it idles (345 MHz against 1980 under load on an H200): a
        # busy kernel right before the L2 flush, in the timing process, as a clock warm-up.
        ("in-process, sleep 1 ms, GPU busy 200 us", lambda: inproc(n, k, sleep_s=1e-3, busy_us=200)),
        ("in-process, sleep 1 ms, GPU busy 1 ms", lambda: inproc(n, k, sleep_s=1e-3, busy_us=1000)),
        ("full protocol", lambda: two_process(n, k, True, True, 0)),
        ("full protocol, GPU busy 200 us", lambda: two_process(n, k, True, True, 0, busy_us=200)),
        ("full protocol, GPU busy 1 ms", lambda: two_process(n, k, True, True, 0, busy_us=1000)),
        ("full protocol, pinned", pinned_judge(lambda: two_process(n, k, True, True, 0, cores=pinned))),
        ("full protocol, pinned, 1 warm-up call", pinned_judge(lambda: two_process(n, k, True, True, 1,
                                                                                   cores=pinned))),
        ("two procs, spin-wait", lambda: two_process_spin(n, k, False)),
        ("two procs, spin-wait, judge writes", lambda: two_process_spin(n, k, True)),
        ("in-process (again)", lambda: inproc(n, k)),
    ]
    if pinned is None:
        protocols = [p for p in protocols if "pinned" not in p[0]]
    if args.only:
        wanted = [w for w in args.only.split(",") if w]
        protocols = [p for p in protocols if p[0].startswith("in-process (") or any(w in p[0] for w in wanted)]
    rows = []
    for name, run in protocols:
        res = run()
        skip = args.rounds // 10
        ref = statistics.median(t[0] for t in res["ref"][skip:]) / 1e3
        cand = statistics.median(t[0] for t in res["cand"][skip:]) / 1e3
        eref = statistics.median(t[1] for t in res["ref"][skip:])
        ecand = statistics.median(t[1] for t in res["cand"][skip:])
        clocks = [t[2] for role in res for t in res[role][skip:] if t[2] == t[2]]
        clock = statistics.median(clocks) if clocks else float("nan")
        rows.append((name, ref, cand, ref / cand, eref, ecand, clock))
        print(f"{name:34s} ref {ref:8.1f} us  cand {cand:8.1f} us  ratio {ref / cand:6.3f}  "
              f"events {eref:7.1f} {ecand:7.1f} ratio {eref / ecand:6.3f}  SM {clock:.0f} MHz", flush=True)
    print(f"\n{torch.cuda.get_device_name()}  numel={args.numel}  rounds={args.rounds}")
    print("| protocol | ref us | cand us | ref/cand | ref event us | cand event us | event ratio | SM MHz |")
    print("|---|---|---|---|---|---|---|---|")
    for name, ref, cand, ratio, eref, ecand, clock in rows:
        print(f"| {name} | {ref:.1f} | {cand:.1f} | {ratio:.3f} | {eref:.1f} | {ecand:.1f} | {eref / ecand:.3f} "
              f"| {clock:.0f} |")


if __name__ == "__main__":
    main()
