"""End-to-end: real daemons (`python -m evalfarm.server --device cpu`) in subprocesses on
loopback, with the real scoring backend and built-in tasks at tiny options."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import time
from pathlib import Path

import grpc
import pytest

from evalfarm.client import FarmClient
from evalfarm.client.cli import run_remote_score, run_status
from evalfarm.tasks import builtin_suite
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc
from evalfarm.verdict import Verdict

from .conftest import TINY, descendants, request, rss_kib, wait_until

TOKEN = "e2e-token-0123456789abcdef0123456789abcdef"


def variant(task: str, kind: str) -> str:
    return next(v for v in builtin_suite().variants(task) if v.kind == kind and v.runs_on("cpu")).load().source


def variant_path(task: str, kind: str) -> Path:
    return next(v for v in builtin_suite().variants(task) if v.kind == kind and v.runs_on("cpu")).path


def cli_args(**kw: object) -> argparse.Namespace:
    base = dict(server=None, task="L1/1", candidate=None, json=True, token_file=None, device="cpu",
                inputs=20, budget=0.5, tolerance=None, size_profile=None, timeout=300)
    base.update(kw)
    return argparse.Namespace(**base)


def test_library_and_cli_end_to_end(spawn_daemon, tmp_path: Path, capsys) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    d = spawn_daemon("--slots", "1", "--auth-token-file", str(token_file))
    with FarmClient([d.target], token=TOKEN, poll_interval_s=0.5, reverify=False) as farm:
        res = farm.score("L1/1", variant("L1/1", "wrong"), options=TINY, deadline_s=240)
    assert res.verdict is Verdict.INCORRECT, res.result.detail
    assert res.host and res.result.task.startswith("L1/1") and res.result.evidence.phases_s

    # the CLI function: exactly one JSON object, same shape as ScoreResult.to_dict() + host
    rc = run_remote_score(cli_args(server=d.target, candidate=str(variant_path("L1/1", "fast")),
                                   token_file=str(token_file)))
    out = capsys.readouterr().out.strip().splitlines()
    assert rc is Verdict.OK and len(out) == 1
    doc = json.loads(out[0])
    assert doc["verdict"] == "OK" and doc["speedup"] > 0 and doc["host"]
    assert {"verdict", "speedup", "detail", "evidence", "task", "candidate_sha256"} <= set(doc)

    # human output, then a verdict from cache
    rc = run_remote_score(cli_args(server=d.target, candidate=str(variant_path("L1/1", "fast")),
                                   token_file=str(token_file), json=False))
    text = capsys.readouterr().out
    assert rc is Verdict.OK and "verdict: OK" in text and "(cached)" in text

    # tool errors: no verdict (the command exits 2) and a message on stderr
    assert run_remote_score(cli_args(server=d.target, candidate=str(tmp_path / "nope.py"),
                                     token_file=str(token_file))) is None
    assert "candidate file not found" in capsys.readouterr().err
    assert run_remote_score(cli_args(server=d.target, candidate=str(variant_path("L1/1", "fast")))) is None
    assert "refused the token" in capsys.readouterr().err
    assert run_remote_score(cli_args(server=d.target, task="L9/9", token_file=str(token_file),
                                     candidate=str(variant_path("L1/1", "fast")))) is None
    assert "unknown task" in capsys.readouterr().err
    assert run_remote_score(cli_args(server="127.0.0.1:1", candidate=str(variant_path("L1/1", "fast")),
                                     timeout=3)) is None
    assert "cannot reach" in capsys.readouterr().err

    assert run_status(argparse.Namespace(server=d.target, json=True, token_file=str(token_file))) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["health"] == "SERVING" and status["slots"] == 1 and status["device_mode"] == "cpu"
    assert d.stop() == 0  # SIGTERM: graceful drain, exit 0


def test_refuses_public_bind_without_token(spawn_daemon) -> None:
    done = spawn_daemon("--host", "0.0.0.0", expect_fail=True)
    assert done.returncode == 2 and "non-loopback" in done.stderr


def test_stream_rpc_real(spawn_daemon) -> None:
    d = spawn_daemon("--slots", "1")
    reqs = [request(variant("L1/1", "wrong"), "w", **TINY), request("", "empty"),
            request(variant("L1/1", "wrong"), "x", task="no/such", **TINY)]
    with grpc.insecure_channel(d.target) as ch:
        out = {o.sample_id: o for o in pb_grpc.EvalFarmStub(ch).ScoreStream(iter(reqs), timeout=240)}
    assert out["w"].verdict == pb.VERDICT_INCORRECT
    # An empty candidate is scored, as a local score would (LOAD_ERROR), not refused.
    assert out["empty"].verdict == pb.VERDICT_LOAD_ERROR and "empty" in out["empty"].detail
    assert out["x"].error.code_name == "INVALID_ARGUMENT" and "unknown task" in out["x"].error.message


def test_restart_keeps_cache(spawn_daemon, tmp_path: Path) -> None:
    cache = tmp_path / "shared-cache"
    src = variant("L1/2", "wrong")
    d1 = spawn_daemon("--slots", "1", cache_dir=cache)
    with grpc.insecure_channel(d1.target) as ch:
        first = pb_grpc.EvalFarmStub(ch).Score(request(src, "a", task="L1/2", **TINY), timeout=240)
    assert first.verdict == pb.VERDICT_INCORRECT and not first.evidence.cached
    assert d1.stop() == 0
    d2 = spawn_daemon("--slots", "1", cache_dir=cache)
    t0 = time.monotonic()
    with grpc.insecure_channel(d2.target) as ch:
        again = pb_grpc.EvalFarmStub(ch).Score(request(src, "b", task="L1/2", **TINY), timeout=60)
    elapsed = time.monotonic() - t0
    assert again.evidence.cached and again.verdict == first.verdict and again.sample_id == "b"
    # Served from the cache, not scored again (a score of this task takes far longer: its build,
    # two workers' start and 1000 rounds); the bound leaves room for a loaded machine.
    assert elapsed < 10.0, elapsed


def test_killed_candidate_process_gives_verdict(spawn_daemon) -> None:
    d = spawn_daemon("--slots", "1", "--warm-judges", "0")  # every worker is the evaluation's
    src = variant("L1/1", "fast").replace(
        "class ModelNew", "import time as _t\n_t.sleep(120)  # killed by the test\n\nclass ModelNew", 1)
    with grpc.insecure_channel(d.target) as ch:
        call = pb_grpc.EvalFarmStub(ch).Score.future(request(src, "victim", **TINY), timeout=240)

        def worker_pids() -> list[int]:
            pids = []
            for pid in descendants(d.pid):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                if b"evalfarm.judge.worker" in cmd:
                    pids.append(pid)
            return pids

        assert wait_until(lambda: bool(worker_pids()), 120, 0.2), d.log()[-2000:]
        time.sleep(1.0)  # let it get into the candidate's import
        t0 = time.monotonic()
        for pid in worker_pids():
            os.kill(pid, signal.SIGKILL)
        reply = call.result(120)
    assert time.monotonic() - t0 < 60
    assert reply.verdict not in (pb.VERDICT_UNSPECIFIED, pb.VERDICT_OK), reply
    assert wait_until(lambda: not worker_pids(), 30)


@pytest.mark.long  # two daemons, one killed mid-stream, its work scored on the other: ~20 s on 2 cores
def test_sigkill_daemon_midstream_work_moves(spawn_daemon) -> None:
    a = spawn_daemon("--slots", "1")
    b = spawn_daemon("--slots", "1")
    base = variant("L1/1", "wrong")
    with FarmClient([a.target, b.target], poll_interval_s=0.3, queue_allowance=1, reverify=False) as farm:
        ids = [farm.submit("L1/1", f"# distinct {i}\n{base}", f"s{i}", options=TINY, deadline_s=400)
               for i in range(3)]
        # wait until A is running one of them, then kill it hard
        with grpc.insecure_channel(a.target) as ch:
            stub = pb_grpc.EvalFarmStub(ch)
            assert wait_until(lambda: stub.Capacity(pb.CapacityRequest(), timeout=2).running == 1, 60)
        a.stop(signal.SIGKILL)
        got = list(farm.results(timeout=400))
        stats = farm.stats
    assert sorted(r.sample_id for r in got) == sorted(ids)  # exactly one result each
    assert all(r.verdict is Verdict.INCORRECT for r in got), [(r.verdict, r.result.detail) for r in got]
    assert all(r.endpoint == b.target for r in got)
    assert stats.get("connection_errors", 0) >= 1


@pytest.mark.slow
@pytest.mark.exclusive  # rejection latency is measured: another test's load would be measured too
def test_load_500_concurrent_one_daemon(spawn_daemon) -> None:
    d = spawn_daemon("--slots", "1", "--queue-limit", "2")
    src = variant("L1/1", "wrong")

    async def wave(n: int) -> tuple[list[str], list[float]]:
        async with grpc.aio.insecure_channel(d.target) as ch:
            stub = pb_grpc.EvalFarmStub(ch)
            await stub.Capacity(pb.CapacityRequest(), timeout=10)

            async def one(i: int) -> tuple[str, float]:
                t0 = time.monotonic()
                try:
                    r = await stub.Score(request(src, f"s{i}", **TINY), timeout=300)
                    return pb.Verdict.Name(r.verdict), time.monotonic() - t0
                except grpc.aio.AioRpcError as err:
                    return err.code().name, time.monotonic() - t0

            out = await asyncio.gather(*(one(i) for i in range(n)))
        return [o[0] for o in out], [o[1] for o in out if o[0] == "RESOURCE_EXHAUSTED"]

    rss0 = rss_kib(d.pid)
    codes1, rejected1 = asyncio.run(asyncio.wait_for(wave(500), 400))
    rss1 = rss_kib(d.pid)
    codes2, _ = asyncio.run(asyncio.wait_for(wave(500), 400))
    rss2 = rss_kib(d.pid)
    assert len(codes1) == 500 and set(codes1) <= {"VERDICT_INCORRECT", "RESOURCE_EXHAUSTED"}, set(codes1)
    assert codes1.count("VERDICT_INCORRECT") >= 1 and len(rejected1) >= 400
    # Rejected at once, not after waiting for the slot (an evaluation takes several seconds);
    # 500 arrivals at once are answered in about a second on 2 cores.
    assert statistics.median(rejected1) < 2.0 and max(rejected1) < 5.0
    # second wave: the cache answers (results, not hangs), and memory stays roughly flat
    assert len(codes2) == 500 and set(codes2) <= {"VERDICT_INCORRECT", "RESOURCE_EXHAUSTED"}
    assert rss2 < rss1 * 1.25 + 30_000, (rss0, rss1, rss2)


@pytest.mark.long  # 200 candidates through two daemons
def test_stream_200_through_two_daemons(spawn_daemon) -> None:
    a = spawn_daemon("--slots", "1")
    b = spawn_daemon("--slots", "1")
    tasks = ("L1/1", "L1/2")
    plan = {}
    with FarmClient([a.target, b.target], poll_interval_s=0.3, queue_allowance=2) as farm:
        for i in range(200):
            task, kind = tasks[i % 2], ("fast", "wrong")[(i // 2) % 2]
            sid = farm.submit(task, variant(task, kind), f"c{i}", options=TINY, deadline_s=600,
                              tags={"task": task, "kind": kind})
            plan[sid] = kind
        got = list(farm.results(timeout=600))
        stats = farm.stats
    ids = [r.sample_id for r in got]
    assert len(ids) == 200 and set(ids) == set(plan)  # exactly one result per sample id
    for r in got:
        want = Verdict.OK if plan[r.sample_id] == "fast" else Verdict.INCORRECT
        assert r.verdict is want, (r.sample_id, r.verdict, r.result.detail)
        assert r.tags["kind"] == plan[r.sample_id]
    assert {r.endpoint for r in got} <= {a.target, b.target}
    assert stats["delivered"] == 200


@pytest.mark.long  # a daemon scoring a queue of real evaluations around a re-verification
def test_reverification_runs_before_queued_work_real(spawn_daemon) -> None:
    """A real daemon, one CPU slot: a re-verification sent behind a running evaluation and
    three queued ones is scored next. The ordinary candidates are made slow by sleeping
    in their import (the load phase)."""
    d = spawn_daemon("--slots", "1", "--drain-timeout", "2")
    slow = variant("L1/1", "wrong").replace(
        "class ModelNew", "import time as _t\n_t.sleep(3)  # slow on purpose\n\nclass ModelNew", 1)
    rv = request(variant("L1/1", "fast"), "rv", **TINY, reverify_above=0.0)
    rv.reverification = True
    with grpc.insecure_channel(d.target) as ch:
        stub = pb_grpc.EvalFarmStub(ch)

        def cap() -> pb.CapacityResponse:
            return stub.Capacity(pb.CapacityRequest(), timeout=5)

        calls = [stub.Score.future(request(f"# 0\n{slow}", "o0", **TINY), timeout=240)]
        assert wait_until(lambda: cap().running == 1, 30)
        for i in range(1, 4):
            calls.append(stub.Score.future(request(f"# {i}\n{slow}", f"o{i}", **TINY), timeout=240))
            assert wait_until(lambda n=i: cap().queue_depth == n, 30)
        t0 = time.monotonic()
        reply = stub.Score(rv, timeout=240)
        waited = time.monotonic() - t0
        still_queued = [c for c in calls[1:] if not c.done()]
        for c in calls:
            c.cancel()
    assert reply.verdict == pb.VERDICT_OK, reply.detail
    assert not reply.evidence.cached and reply.phases.queue_s < waited
    assert len(still_queued) == 3, "a queued ordinary request finished before the re-verification"
    scored = [line for line in d.log().splitlines() if "event=scored" in line]
    assert "sample_id=o0" in scored[0], scored  # the one that was running
    assert "sample_id=rv" in scored[1] and "reverification=true" in scored[1], scored
