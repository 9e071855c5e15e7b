"""Operating a daemon: slot health, metrics by name and label, log formats, config file, token rotation."""

from __future__ import annotations

import argparse
import io
import json
import logging
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from evalfarm.server.cli import add_serve_arguments, config_from_args, run_serve
from evalfarm.server.config import ServerConfigError
from evalfarm.server.daemon import slot_health_name
from evalfarm.server.logformat import (
    JsonFormatter,
    LogfmtFormatter,
    setup_logging,
    structured_fields,
)
from evalfarm.server.slot_health import FAULT_INJECTION_ENV
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc

from .conftest import fake_source, free_port, request, wait_until


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """{sample name: [(labels, value), ...]} from a real /metrics scrape."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def value(series: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    hits = [v for lab, v in series[name] if all(lab.get(k) == want for k, want in labels.items())]
    assert len(hits) == 1, (name, labels, series.get(name))
    return hits[0]


def health(target: str, service: str) -> int:
    with grpc.insecure_channel(target) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


# -- slot health ------------------------------------------------------------------------------

def test_faulty_slot_taken_out_and_probed_back(daemon_factory, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    faults = tmp_path / "faulty-slots"
    faults.write_text("0")
    monkeypatch.setenv(FAULT_INJECTION_ENV, str(faults))
    port = free_port()
    d = daemon_factory(devices=("cpu", "cpu"), fault_threshold=2, probe_interval_s=0.3, metrics_port=port)
    ch, stub = d.stub()
    with ch:
        first = stub.Score(request(fake_source(salt="a"), "a"), timeout=10)
        assert first.verdict == pb.VERDICT_CUDA_FAULT and first.slot == 0
        # the second fault in a row on slot 0 trips the probe, which fails too: not trusted
        second = stub.Score(request(fake_source(salt="b"), "b"), timeout=10)
        assert second.verdict == pb.VERDICT_INFRA_ERROR and "taken out of service" in second.detail
        cap = stub.Capacity(pb.CapacityRequest(), timeout=5)
        assert cap.out_of_service == 1 and cap.free_slots == 1
        assert not cap.slot_status[0].in_service and "probe" in cap.slot_status[0].reason
        assert cap.slot_status[1].in_service and cap.gpu_model == "cpu"
        assert health(d.target, slot_health_name(0)) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert health(d.target, slot_health_name(1)) == health_pb2.HealthCheckResponse.SERVING
        # new work goes to the healthy slot only
        for i in range(3):
            r = stub.Score(request(fake_source(salt=f"c{i}"), f"c{i}"), timeout=10)
            assert r.verdict == pb.VERDICT_OK and r.slot == 1
        series = scrape(port)
        assert value(series, "evalfarm_slot_in_service", slot="0") == 0.0
        assert value(series, "evalfarm_slot_in_service", slot="1") == 1.0
        assert value(series, "evalfarm_slots", state="out_of_service") == 1.0
        assert value(series, "evalfarm_slot_probes_total", slot="0", outcome="fail") >= 1.0
        assert value(series, "evalfarm_verdicts_total", slot="0", verdict="CUDA_FAULT") == 1.0
        assert value(series, "evalfarm_verdicts_total", slot="0", verdict="INFRA_ERROR") == 1.0
        assert value(series, "evalfarm_verdicts_total", slot="1", verdict="OK") == 3.0
        # the GPU recovers: the next probe passes and the slot is back
        faults.write_text("")
        assert wait_until(lambda: stub.Capacity(pb.CapacityRequest(), timeout=5).out_of_service == 0, 10)
        assert health(d.target, slot_health_name(0)) == health_pb2.HealthCheckResponse.SERVING
        assert value(scrape(port), "evalfarm_slot_probes_total", slot="0", outcome="pass") == 1.0
        r = stub.Score(request(fake_source(salt="d"), "d"), timeout=10)
        assert r.verdict == pb.VERDICT_OK and r.slot == 0


def test_candidate_faults_pass_the_probe_and_keep_the_slot(daemon_factory) -> None:
    """Faults that are the candidates' own: the probe passes, the verdicts stand, the slot stays."""
    d = daemon_factory(devices=("cpu",), fault_threshold=2, probe_interval_s=0.3)
    ch, stub = d.stub()
    with ch:
        verdicts = [stub.Score(request(fake_source("TIMEOUT", None, salt=str(i)), str(i)), timeout=10).verdict
                    for i in range(3)]
        assert verdicts == [pb.VERDICT_TIMEOUT] * 3
        cap = stub.Capacity(pb.CapacityRequest(), timeout=5)
        assert cap.out_of_service == 0 and cap.slot_status[0].in_service


def test_all_slots_out_rejects_with_unavailable(daemon_factory, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    faults = tmp_path / "faulty"
    faults.write_text("0")
    monkeypatch.setenv(FAULT_INJECTION_ENV, str(faults))
    d = daemon_factory(devices=("cpu",), fault_threshold=1, probe_interval_s=30)
    ch, stub = d.stub()
    with ch:
        assert stub.Score(request(fake_source(salt="x"), "x"), timeout=10).verdict == pb.VERDICT_INFRA_ERROR
        with pytest.raises(grpc.RpcError) as err:
            stub.Score(request(fake_source(salt="y"), "y"), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "out of service" in err.value.details()
    assert health(d.target, "evalfarm.v1.EvalFarm") == health_pb2.HealthCheckResponse.NOT_SERVING


def test_fault_injection_is_off_without_the_environment(daemon_factory, monkeypatch) -> None:
    monkeypatch.delenv(FAULT_INJECTION_ENV, raising=False)
    d = daemon_factory()
    assert d.daemon.service._faults is None


# -- metrics ----------------------------------------------------------------------------------

def test_metrics_names_and_labels(daemon_factory) -> None:
    port = free_port()
    d = daemon_factory(devices=("cpu", "cpu"), metrics_port=port)
    before = scrape(port)
    # series exist before the first event, and no _created series at all
    assert value(before, "evalfarm_verdicts_total", slot="1", verdict="CUDA_FAULT") == 0.0
    assert value(before, "evalfarm_slot_busy_seconds_total", slot="0", gpu_uuid="cpu") == 0.0
    assert not [n for n in before if n.endswith("_created")]
    assert value(before, "evalfarm_slots", state="total") == 2.0
    assert value(before, "evalfarm_queue_depth", queue="ordinary") == 0.0
    info = before["evalfarm_build_info"][0][0]
    assert info["mode"] == "cpu" and info["python"] and info["version"]
    assert "process_cpu_seconds_total" in before and "python_gc_objects_collected_total" in before
    ch, stub = d.stub()
    with ch:
        slow = stub.Score.future(request(fake_source(sleep=1.0, salt="s"), "s"), timeout=10)
        assert wait_until(lambda: value(scrape(port), "evalfarm_slots", state="busy") == 1.0, 5)
        busy = scrape(port)
        assert value(busy, "evalfarm_slot_busy", slot="0", gpu_uuid="cpu", gpu="cpu") == 1.0
        assert value(busy, "evalfarm_slot_busy", slot="1") == 0.0
        assert slow.result(10).verdict == pb.VERDICT_OK
    after = scrape(port)
    assert value(after, "evalfarm_verdicts_total", slot="0", verdict="OK") == 1.0
    assert value(after, "evalfarm_phase_seconds_count", phase="load", slot="0", gpu_uuid="cpu") == 1.0
    assert value(after, "evalfarm_slot_busy_seconds_total", slot="0") >= 0.9
    assert value(after, "evalfarm_slots", state="busy") == 0.0


# -- logs -------------------------------------------------------------------------------------

def _record(msg: str, *args: object) -> logging.LogRecord:
    record = logging.LogRecord("evalfarm.test", logging.INFO, __file__, 1, msg, args, None)
    record.created = 1700000000.25
    return record


def test_logfmt_quotes_values_and_uses_utc() -> None:
    line = LogfmtFormatter().format(_record("event=scored sample_id=%s detail=%r cached=%s queue_s=%.3f",
                                            "s 1", 'it said "no"', False, 0.12345))
    assert line == ('ts=2023-11-14T22:13:20.250Z level=info logger=evalfarm.test event=scored '
                    'sample_id="s 1" detail="it said \\"no\\"" cached=false queue_s=0.123')
    free = LogfmtFormatter().format(_record("a message, not key=value %s", "x"))
    assert free.endswith('msg="a message, not key=value x"')


def test_json_log_lines_parse() -> None:
    out = json.loads(JsonFormatter().format(_record("event=listening port=%d tls=%s", 5, True)))
    assert out == {"ts": "2023-11-14T22:13:20.250Z", "level": "info", "logger": "evalfarm.test",
                   "event": "listening", "port": 5, "tls": True}
    assert structured_fields(_record("event=x %s", 1)) is None  # an argument without a key


def test_setup_logging_json_stream() -> None:
    buf = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    setup_logging("INFO", "json", stream=buf)
    try:
        logging.getLogger("evalfarm.x").warning("event=slot_out_of_service slot=%d", 3)
    finally:  # put back what was there: a handler on this test's captured stderr would outlive it
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in handlers:
            root.addHandler(h)
        root.setLevel(level)
    assert json.loads(buf.getvalue())["slot"] == 3


# -- config file ------------------------------------------------------------------------------

def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p.parse_args(list(argv))


def test_config_file_and_flag_override(tmp_path: Path) -> None:
    f = tmp_path / "farm.toml"
    f.write_text('device = "cpu"\nslots = 3\nqueue-limit = 9\ndrain_timeout = 5\nfault-threshold = 4\n')
    cfg = config_from_args(parse("--config", str(f)))
    assert cfg.slots == 3 and cfg.queue_limit == 9 and cfg.drain_timeout_s == 5.0 and cfg.fault_threshold == 4
    cfg = config_from_args(parse("--config", str(f), "--queue-limit", "2"))
    assert cfg.queue_limit == 2 and cfg.slots == 3


@pytest.mark.parametrize(("text", "match"), [
    ("queue_limt = 3\n", "unknown field 'queue_limt' \\(did you mean 'queue-limit'\\?\\)"),
    ('slots = "two"\n', "field 'slots': expected an integer"),
    ('device = "tpu"\n', "field 'device': must be one of cpu, cuda"),
    ("exit-with-parent = 1\n", "field 'exit-with-parent': expected true or false"),
    ("port = \n", "not valid TOML"),
    ("fault-threshold = -1\n", "--fault-threshold must be >= 0"),
])
def test_config_file_errors_name_the_field(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "farm.toml"
    f.write_text(text)
    with pytest.raises(ServerConfigError, match=match):
        config_from_args(parse("--config", str(f)))


def test_serve_reports_config_file_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "farm.toml"
    f.write_text("bogus = 1\n")
    assert run_serve(parse("--config", str(f))) == 2
    assert "unknown field 'bogus'" in capsys.readouterr().err
    assert run_serve(parse("--config", str(tmp_path / "missing.toml"))) == 2
    assert "cannot read" in capsys.readouterr().err


# -- token rotation ---------------------------------------------------------------------------

def _capacity(target: str, token: str) -> grpc.StatusCode:
    with grpc.insecure_channel(target) as ch:
        try:
            pb_grpc.EvalFarmStub(ch).Capacity(pb.CapacityRequest(), timeout=5,
                                             metadata=(("authorization", f"Bearer {token}"),))
            return grpc.StatusCode.OK
        except grpc.RpcError as err:
            return err.code()


def test_token_rotation_without_restart(daemon_factory, tmp_path: Path) -> None:
    old, new = "o" * 40, "n" * 40
    tokens = tmp_path / "token"
    tokens.write_text(old + "\n")
    tokens.chmod(0o600)
    d = daemon_factory(auth_token_file=tokens)
    assert _capacity(d.target, old) == grpc.StatusCode.OK
    assert _capacity(d.target, new) == grpc.StatusCode.UNAUTHENTICATED
    tokens.write_text(f"# rotation in progress\n{old}\n{new}\n")
    time.sleep(1.1)
    assert _capacity(d.target, old) == grpc.StatusCode.OK and _capacity(d.target, new) == grpc.StatusCode.OK
    tokens.write_text(new + "\n")
    time.sleep(1.1)
    assert _capacity(d.target, new) == grpc.StatusCode.OK
    assert _capacity(d.target, old) == grpc.StatusCode.UNAUTHENTICATED
    tokens.write_text("short\n")  # a broken file keeps the last good tokens
    time.sleep(1.1)
    assert _capacity(d.target, new) == grpc.StatusCode.OK


def test_token_file_with_three_tokens_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text("\n".join(c * 40 for c in "abc"))
    f.chmod(0o600)
    with pytest.raises(ServerConfigError, match="at most 2"):
        config_from_args(parse("--device", "cpu", "--auth-token-file", str(f)))
