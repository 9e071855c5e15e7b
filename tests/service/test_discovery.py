"""Discovery (DNS names, endpoints files) and one-GPU-model routing, with real loopback daemons."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import pytest

from evalfarm.client import FarmClient
from evalfarm.client.cli import run_status
from evalfarm.client.core import AsyncFarmClient, _Endpoint
from evalfarm.client.discovery import Discovery, Dns, EndpointSpecError, File, Static, parse_spec
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.verdict import Verdict
from learner.rl.farm import FarmOutcome, one_model_per_group

from .conftest import fake_source


class FakeResolver:
    """Answers from a dict the test changes while the client runs (name -> addresses)."""

    def __init__(self) -> None:
        self.records: dict[str, list[str]] = {}
        self.fail = False
        self.calls = 0

    async def resolve(self, host: str, port: int) -> list[str]:
        self.calls += 1
        if self.fail:
            raise OSError("resolver down")
        return list(self.records.get(host, []))


def test_parse_specs() -> None:
    assert parse_spec("dns:///farm.svc:50051") == Dns("farm.svc", 50051)
    assert parse_spec("dns:farm:1") == Dns("farm", 1)
    assert parse_spec("file:///etc/farm/endpoints") == File(Path("/etc/farm/endpoints"))
    assert parse_spec("[::1]:5") == Static("[::1]:5")
    for bad in ("dns:///farm", "dns://8.8.8.8/farm:1", "host", "file:"):
        with pytest.raises(EndpointSpecError):
            parse_spec(bad)


def test_resolver_failure_keeps_last_answer(tmp_path: Path) -> None:
    r = FakeResolver()
    r.records["farm"] = ["10.0.0.1:1", "10.0.0.2:1"]
    f = tmp_path / "endpoints"
    f.write_text("# the farm\n10.0.0.9:1\ndns:///farm:1\n")
    d = Discovery([f"file://{f}", "10.0.0.1:1"], r)
    assert asyncio.run(d.resolve()) == ["10.0.0.9:1", "10.0.0.1:1", "10.0.0.2:1"]
    r.fail = True
    f.unlink()
    assert asyncio.run(d.resolve()) == ["10.0.0.9:1", "10.0.0.1:1", "10.0.0.2:1"]


def test_dns_hosts_join_and_leave_mid_stream(daemon_factory) -> None:
    """Hosts appear and vanish while 60 samples stream: each gets exactly one result."""
    a, b, c = (daemon_factory(devices=("cpu",) * 2, queue_limit=16) for _ in range(3))
    r = FakeResolver()
    r.records["farm.test"] = [a.target, b.target]
    n = 60
    with FarmClient(["dns:///farm.test:50051"], resolver=r, discovery_interval_s=0.2,
                    poll_interval_s=0.1) as farm:
        assert sorted(farm.capacity()) == sorted([a.target, b.target])
        ids = [farm.submit("L1/1", fake_source(sleep=0.15, salt=str(i))) for i in range(n)]
        time.sleep(0.5)
        r.records["farm.test"] = [b.target, c.target]  # a leaves (still running), c joins
        time.sleep(0.6)
        started_on_a = a.backend.started
        got = list(farm.results(timeout=30))
        stats = farm.stats
    assert sorted(res.sample_id for res in got) == sorted(ids)  # nothing lost, nothing doubled
    assert all(res.verdict is Verdict.OK for res in got)
    assert stats["delivered"] == n and stats.get("duplicates_dropped", 0) == 0
    assert stats["daemons_removed"] == 1
    assert c.backend.started > 0, "the daemon that joined got work"
    assert a.backend.started == started_on_a, "no new work for the daemon that left"
    assert {res.endpoint for res in got} <= {a.target, b.target, c.target}
    assert not any(res.endpoint == a.target for res in got[-20:])


def test_vanished_host_work_is_redispatched(daemon_factory) -> None:
    """A host dropped from DNS while it holds slow work: that work finishes elsewhere."""
    a, b = daemon_factory(devices=("cpu",)), daemon_factory(devices=("cpu",))
    r = FakeResolver()
    r.records["farm.test"] = [a.target]
    with FarmClient(["dns:///farm.test:1"], resolver=r, discovery_interval_s=0.2, poll_interval_s=0.1) as farm:
        sid = farm.submit("L1/1", fake_source(sleep=3.0, salt="slow"))
        time.sleep(0.5)
        assert a.backend.started == 1
        r.records["farm.test"] = [b.target]
        res = next(iter(farm.results(timeout=20)))
        assert farm.stats["redispatched_on_removal"] == 1
    assert res.sample_id == sid and res.verdict is Verdict.OK and res.endpoint == b.target
    assert res.attempts == 1  # a host leaving is not the candidate's fault


def test_endpoints_file_reread_when_it_changes(daemon_factory, tmp_path: Path) -> None:
    a, b = daemon_factory(), daemon_factory()
    f = tmp_path / "endpoints"
    f.write_text(f"{a.target}\n")
    with FarmClient([f"file://{f}"], discovery_interval_s=0.1, poll_interval_s=0.1) as farm:
        assert list(farm.capacity()) == [a.target]
        f.write_text(f"# moved\n{b.target}\n")
        deadline = time.monotonic() + 5
        while list(farm.capacity()) != [b.target] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(farm.capacity()) == [b.target]
        assert farm.score("L1/1", fake_source(salt="f"), deadline_s=10).endpoint == b.target


def _gpu_daemon(factory, model: str):  # fake backend: nothing touches CUDA
    return factory(devices=("cuda:0", "cuda:1"), gpu_names=(model, model), gpu_uuids=("GPU-a", "GPU-b"))


def test_task_samples_go_to_one_gpu_model(daemon_factory) -> None:
    h100, a100 = _gpu_daemon(daemon_factory, "NVIDIA H100"), _gpu_daemon(daemon_factory, "NVIDIA A100")
    with FarmClient([h100.target, a100.target], poll_interval_s=0.1) as farm:
        got = farm.score_many([("L1/1", fake_source(sleep=0.05, salt=str(i))) for i in range(16)], timeout=30)
    models = {res.gpu_name for res in got}
    assert len(models) == 1 and models <= {"NVIDIA H100", "NVIDIA A100"}
    assert all(res.gpu_uuid in ("GPU-a", "GPU-b") for res in got)
    with FarmClient([h100.target, a100.target], poll_interval_s=0.1, gpu_model="NVIDIA A100") as farm:
        got = farm.score_many([("L1/2", fake_source(salt=f"x{i}")) for i in range(6)], timeout=30)
    assert {res.endpoint for res in got} == {a100.target} and {res.gpu_name for res in got} == {"NVIDIA A100"}


def test_learner_refuses_mixed_models_in_a_group() -> None:
    outs = [FarmOutcome("a", "OK", 1.2, gpu_name="H100"), FarmOutcome("b", "OK", 3.0, gpu_name="A100"),
            FarmOutcome("c", "OK", 1.1, gpu_name="H100"), FarmOutcome("d", "LOST"),
            FarmOutcome("e", "OK", 2.0, gpu_name="A100")]
    assert one_model_per_group(outs, [0, 0, 0, 0, 1]) == [True, False, True, True, True]


def test_status_fleet_table(daemon_factory, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = daemon_factory(devices=("cpu",) * 2), daemon_factory()
    args = argparse.Namespace(server=[f"{a.target},{b.target}", "127.0.0.1:1"], json=True, token_file=None,
                              timeout=3)
    assert run_status(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["daemons"] == 3 and doc["totals"]["reachable"] == 2 and doc["totals"]["slots"] == 3
    assert doc["totals"]["slots_by_model"] == {"cpu": 3}
    args.json = False
    assert run_status(args) == 0
    out = capsys.readouterr().out
    assert "UNREACHABLE" in out and a.target in out and "2/3 daemons reachable" in out


class _CancelledOnClose:
    """A daemon's channel and stub whose Capacity call hangs until the channel closes, which cancels
    the call (not the task awaiting it), as grpc.aio does."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.pending: asyncio.Future[None] | None = None

    async def Capacity(self, request, timeout=None, metadata=None):  # noqa: N802 - the stub's name
        self.pending = asyncio.get_running_loop().create_future()
        self.asked.set()
        await self.pending

    async def close(self, grace=None) -> None:
        if self.pending is not None:
            self.pending.cancel()


class _Answers:
    async def Capacity(self, request, timeout=None, metadata=None):  # noqa: N802
        return pb.CapacityResponse(slots=1, queue_limit=4, host="kept")


def test_capacity_leaves_out_a_daemon_removed_while_it_is_asked() -> None:
    # A daemon that discovery removes while a Capacity call to it is under way: its channel is
    # closed, which cancels that call. capacity() answers for the daemons still in use instead of
    # raising CancelledError (seen when an endpoints file changed under a polling client).
    async def main() -> None:
        client = AsyncFarmClient(["127.0.0.1:1"])
        gone_io = _CancelledOnClose()
        gone = _Endpoint("gone:1", gone_io, gone_io)  # type: ignore[arg-type]
        kept = _Endpoint("kept:1", _CancelledOnClose(), _Answers())  # type: ignore[arg-type]
        client._endpoints = [gone, kept]
        asking = asyncio.ensure_future(client.capacity())
        await asyncio.wait_for(gone_io.asked.wait(), 5)
        client._remove_endpoint(gone)
        caps = await asyncio.wait_for(asking, 5)
        assert list(caps) == ["kept:1"] and caps["kept:1"].host == "kept"
        # A cancellation of the caller itself still cancels it.
        stuck_io = _CancelledOnClose()
        client._endpoints = [_Endpoint("stuck:1", stuck_io, stuck_io)]  # type: ignore[arg-type]
        asking = asyncio.ensure_future(client.capacity())
        await asyncio.wait_for(stuck_io.asked.wait(), 5)
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking

    asyncio.run(main())
