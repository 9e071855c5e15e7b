#!/usr/bin/env python
"""Daemon overhead per candidate (gRPC + queueing) versus scoring the same candidate in-process.

Starts one CPU daemon on loopback (a subprocess, reaped at the end), then for one built-in
task variant measures, sequentially:

  in-process   evalfarm.scoring.start(...).result()                    (wall seconds)
  via daemon   Score RPC with no_cache (a fresh evaluation each time)  (wall seconds)
  cached RPC   Score RPC answered from the daemon's result cache       (gRPC + admission only)

and prints a table with the per-candidate overhead and the ratio daemon / in-process.

    .venv/bin/python benchmarks/bench_daemon_overhead.py --task L1/1 --kind wrong --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalfarm import scoring  # noqa: E402
from evalfarm.config import ScoreConfig  # noqa: E402
from evalfarm.server.local import LocalDaemon  # noqa: E402
from evalfarm.tasks import builtin_suite  # noqa: E402
from evalfarm.v1 import evalfarm_pb2 as pb  # noqa: E402
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="L1/1")
    ap.add_argument("--kind", default="wrong", choices=("fast", "wrong"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cached-repeats", type=int, default=200)
    ap.add_argument("--inputs", type=int, default=20)
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--allow-weak-sandbox", action="store_true",
                    help="start the daemon even where this host has no strong sandbox (it says so)")
    args = ap.parse_args()

    suite = builtin_suite()
    task = suite.load(args.task)
    variant = next(v for v in suite.variants(args.task) if v.kind == args.kind and v.runs_on("cpu"))
    cand = variant.load()
    cfg = ScoreConfig(device="cpu", num_correctness_inputs=args.inputs, timing_budget_s=args.budget)
    options = pb.ScoreOptions(num_correctness_inputs=args.inputs, timing_budget_s=args.budget)

    local = []
    pool = scoring.default_build_pool()
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        res = scoring.start(task, cand, cfg, build_pool=pool).result(600)
        local.append(time.perf_counter() - t0)
    verdict = res.verdict.value

    with tempfile.TemporaryDirectory() as cache_dir:
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        with LocalDaemon(device="cpu", slots=1, cache_dir=cache_dir, env=env, start_timeout_s=60,
                         allow_weak_sandbox=args.allow_weak_sandbox) as daemon:
            with grpc.insecure_channel(daemon.endpoint) as ch:
                stub = pb_grpc.EvalFarmStub(ch)
                req = pb.ScoreRequest(task=pb.TaskRef(name=args.task), options=options, no_cache=True,
                                      candidate=pb.Candidate(source=cand.source.encode(), sample_id="b"))
                stub.Capacity(pb.CapacityRequest(), timeout=10)
                remote, server_total = [], []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    reply = stub.Score(req, timeout=600)
                    remote.append(time.perf_counter() - t0)
                    server_total.append(reply.phases.total_s)
                req.no_cache = False
                cached = []
                for _ in range(args.cached_repeats):
                    t0 = time.perf_counter()
                    stub.Score(req, timeout=60)
                    cached.append(time.perf_counter() - t0)

    lm, rm = statistics.median(local), statistics.median(remote)
    cm = statistics.median(cached)
    rows = [
        ("in-process score", f"{lm:.3f}", "-", "1.000"),
        ("via daemon (fresh)", f"{rm:.3f}", f"{rm - lm:+.3f}", f"{rm / lm:.3f}"),
        ("  of which on daemon", f"{statistics.median(server_total):.3f}", "-", "-"),
        ("cached RPC round trip", f"{cm * 1000:.2f} ms", f"{cm * 1000:.2f} ms", f"{cm / lm:.4f}"),
    ]
    print(f"task {args.task}, variant {variant.label} ({args.kind}, verdict {verdict}), "
          f"{args.inputs} inputs, budget {args.budget}s, median of {args.repeats} "
          f"(cached: {args.cached_repeats})")
    print(f"{'path':<24} {'seconds':>10} {'overhead':>11} {'ratio':>7}")
    for row in rows:
        print(f"{row[0]:<24} {row[1]:>10} {row[2]:>11} {row[3]:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
