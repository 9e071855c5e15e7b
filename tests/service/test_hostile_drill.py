"""The operator's hostile-tenant drill (evalfarm.ops.hostile_drill) against real daemons: it passes
against the strong sandbox, and it fails, naming the file, where a secret does cross."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import grpc
import pytest

from evalfarm.client.channel import auth_metadata
from evalfarm.ops import hostile_drill
from evalfarm.sandbox import bubblewrap, confine
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc
from tests.sandbox_under_test import SANDBOX


@pytest.fixture
def daemon_files(tmp_path: Path) -> dict[str, Path]:
    """A token and a canary beside it, readable by their owner only, as an operator keeps them."""
    etc = tmp_path / "etc"
    etc.mkdir()
    files = {"token": etc / "token", "canary": etc / "canary"}
    files["token"].write_text(secrets.token_hex(32) + "\n")
    files["canary"].write_text(f"drill-canary-{secrets.token_hex(16)}\n")
    for f in files.values():
        f.chmod(0o600)
    return files


def _drill(target: str, files: dict[str, Path], only: str = "") -> dict:
    metadata = auth_metadata(files["token"].read_text().strip())
    with grpc.insecure_channel(target) as ch:
        return hostile_drill.run(pb_grpc.EvalFarmStub(ch), [str(files["token"]), str(files["canary"])],
                                 "/etc/passwd", metadata=metadata, timeout=600, only=only)


def test_what_counts_as_a_secret_and_as_crossing(tmp_path: Path) -> None:
    key = tmp_path / "tls.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw\nshort\n-----END PRIVATE KEY-----\n")
    parts = hostile_drill.secret_texts(str(key))
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw" in parts
    assert not any(p.startswith("-----") for p in parts[1:]) and "short" not in parts[1:]
    sample = pb.ScoredSample(detail="... MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw ...")
    assert hostile_drill.crossed(sample, {str(key): parts}) == [str(key)]
    assert hostile_drill.crossed(pb.ScoredSample(evidence_json='{"detail": "-----BEGIN PRIVATE KEY-----"}'),
                                 {str(key): parts}) == []



class _ScriptedStub:
    """Answers Score with the given samples in turn (the drill's own rules, without a daemon)."""

    def __init__(self, answers: list[pb.ScoredSample]) -> None:
        self.answers = list(answers)
        self.sent = 0

    def Score(self, request, metadata=(), timeout=None):  # noqa: N802 - the gRPC method's name
        self.sent += 1
        return self.answers.pop(0)


def test_an_infra_error_is_sent_again_and_its_detail_kept(tmp_path: Path) -> None:
    control = tmp_path / "control"
    control.write_text("control-line-that-must-come-back\n")
    secret = tmp_path / "secret"
    secret.write_text("secret-line-that-must-never-come-back\n")
    infra = pb.ScoredSample(verdict=pb.VERDICT_INFRA_ERROR, detail="the reference worker did not start (TimeoutError)")
    judged = pb.ScoredSample(verdict=pb.VERDICT_LOAD_ERROR, detail="RuntimeError: LEAKcontrol-line-that-must-come-backEND")
    stub = _ScriptedStub([infra, infra, judged])
    report = hostile_drill.run(stub, [str(secret)], str(control), only="incbin of the control", log=lambda _: None)
    (row,) = report["attacks"]
    assert stub.sent == 3 and report["passed"]
    assert row["verdict"] == "VERDICT_LOAD_ERROR" and row["control_returned"] is True
    assert row["infra_errors"] == [infra.detail, infra.detail]

    # Never judged: the control did not come back, and the drill fails saying why.
    stub = _ScriptedStub([infra] * 3)
    lines: list[str] = []
    report = hostile_drill.run(stub, [str(secret)], str(control), only="incbin of the control", log=lines.append)
    assert stub.sent == 3 and not report["passed"]
    assert report["attacks"][0]["control_returned"] is False and "did not start" in lines[0]

    # A secret in an INFRA_ERROR's detail crossed, whatever the later verdict.
    leaky = pb.ScoredSample(verdict=pb.VERDICT_INFRA_ERROR, detail="secret-line-that-must-never-come-back")
    stub = _ScriptedStub([leaky, judged])
    report = hostile_drill.run(stub, [str(secret)], str(control), only="incbin of the control", log=lambda _: None)
    assert not report["passed"] and report["attacks"][0]["crossed"] == [str(secret)]

@pytest.mark.slow
@pytest.mark.long  # builds several C++ extensions (make test-long; deploy/smoke.sh runs the drill too)
@pytest.mark.skipif(not SANDBOX.strong, reason=f"needs the strong sandbox: {SANDBOX.summary()}")
def test_the_drill_passes_against_the_strong_sandbox(spawn_daemon, daemon_files) -> None:
    d = spawn_daemon("--auth-token-file", str(daemon_files["token"]), "--warm-judges", "0")
    report = _drill(d.target, daemon_files)
    assert report["passed"], (report, d.log()[-6000:])
    assert len(report["attacks"]) >= 8 and not any(r["crossed"] for r in report["attacks"])
    assert all(r["control_returned"] for r in report["attacks"] if r["control_returned"] is not None)


@pytest.mark.skipif(os.geteuid() != 0, reason="candidates that stay root need a root daemon")
def test_the_drill_fails_where_a_secret_crosses(spawn_daemon, daemon_files, monkeypatch) -> None:
    # The weakest a daemon can be told to run: no bubblewrap, and candidates that stay root.
    monkeypatch.setenv(bubblewrap.MODE_ENV, "builtin")
    monkeypatch.setenv(confine.UID_ENV, "off")
    d = spawn_daemon("--auth-token-file", str(daemon_files["token"]), "--warm-judges", "0",
                     "--allow-weak-sandbox")
    report = _drill(d.target, daemon_files, only="read at import")
    assert not report["passed"]
    (row,) = report["attacks"]
    assert set(row["crossed"]) == {str(daemon_files["token"]), str(daemon_files["canary"])}, row
