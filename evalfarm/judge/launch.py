"""The judge process's entry point: harden, start the two workers, and only then import the judge.

A worker's start-up (interpreter, ``import torch``, a CUDA context) takes seconds, and so does the
judge's own ``import torch``; started first, the workers start up while the judge imports, rather
than after it (evalfarm.judge.standby's start-up figures: ``standby_imports``, ``standby_startup``).
Nothing here imports torch (tests/test_judge_launch.py checks it); the order of the hardening
steps is the judge's as before.

    python -m evalfarm.judge.launch FD --device cuda [--request-timeout S] [--cache-dir DIR]
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> None:
    from multiprocessing.connection import Connection

    from evalfarm.judge import cpu_pinning, framing
    from evalfarm.judge.worker_processes import StartedWorkers, start_workers
    from evalfarm.sandbox import bubblewrap, confine

    logging.basicConfig(level=os.environ.get("EVALFARM_LOG_LEVEL", "WARNING"))
    # Dies with its caller; not dumpable (no other uid reads its memory or environment); orphans
    # of its workers are re-parented to it, to be killed when the evaluation ends.
    confine.die_with_parent(int(os.environ.get("EVALFARM_PARENT_PID", os.getppid())))
    hardening = confine.harden_trusted_process()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # On its own core before any other thread starts (the workers get theirs as they start).
    cores = cpu_pinning.plan(args.device)
    if cores is not None:
        note = cpu_pinning.pin_self(cores.judge)
        hardening.append(note or f"cpu cores: judge {cores.judge}, reference worker {cores.reference}, "
                                 f"candidate worker {cores.candidate}")
    if sys.pycache_prefix:  # evalfarm.judge.bytecode
        hardening.append(f"judge bytecode kept in the farm's cache {sys.pycache_prefix} (its workers read it, "
                         f"never writing)")
    conn = Connection(args.fd)

    def report_pgid(pgid: int) -> None:
        framing.send_json(conn, {"op": "worker", "pgid": pgid})

    # Everything that does not depend on the evaluation happens before its request arrives; the
    # workers first, so they start up while this process imports the judge.
    try:
        started: StartedWorkers | None = start_workers(args.device, report_pgid)
    except bubblewrap.SandboxUnavailable as err:
        started = None  # the evaluation tries again and reports why it cannot
        hardening = [*hardening, str(err)]
    from evalfarm.judge import serve  # torch and the rest of the judge

    serve.MAIN_AT[0] = time.monotonic()
    serve.serve(conn, args, started, hardening, report_pgid)


def parse_args(argv: list[str]) -> Any:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m evalfarm.judge.launch")
    parser.add_argument("fd", type=int, help="the inherited socket to the judge's owner")
    parser.add_argument("--device", required=True, help="the evaluation device (cpu, cuda, cuda:N)")
    parser.add_argument("--request-timeout", type=float, default=60.0,
                        help="seconds to wait for the evaluation request before exiting")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main()
