"""TLS and mTLS with throwaway certificates (openssl), in-process daemon with a fake backend."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import grpc
import pytest

from evalfarm.client import FarmClient, TlsConfig
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc
from evalfarm.verdict import Verdict

from .conftest import fake_source

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
         "-days", "1", "-subj", "/CN=test-ca", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name in ("server", "client"):
        _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}", cwd=d)
        _run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "1", "-extfile", "ext.cnf", cwd=d)
    return d


def test_tls(daemon_factory, pki: Path) -> None:
    d = daemon_factory(tls_cert=pki / "server.pem", tls_key=pki / "server.key")
    with FarmClient([d.target], tls=TlsConfig(root_ca=pki / "ca.pem"), poll_interval_s=0.2) as farm:
        assert farm.score("L1/1", fake_source(), deadline_s=10).verdict is Verdict.OK
    with grpc.insecure_channel(d.target) as ch, pytest.raises(grpc.RpcError):
        pb_grpc.EvalFarmStub(ch).Capacity(pb.CapacityRequest(), timeout=3)


def test_mtls_requires_client_cert(daemon_factory, pki: Path) -> None:
    d = daemon_factory(tls_cert=pki / "server.pem", tls_key=pki / "server.key", tls_client_ca=pki / "ca.pem")
    good = TlsConfig(root_ca=pki / "ca.pem", client_cert=pki / "client.pem", client_key=pki / "client.key")
    with FarmClient([d.target], tls=good, poll_interval_s=0.2) as farm:
        assert farm.score("L1/1", fake_source(), deadline_s=10).verdict is Verdict.OK
    creds = grpc.ssl_channel_credentials(root_certificates=(pki / "ca.pem").read_bytes())
    with grpc.secure_channel(d.target, creds) as ch, pytest.raises(grpc.RpcError):
        pb_grpc.EvalFarmStub(ch).Capacity(pb.CapacityRequest(), timeout=3)


def test_score_cli_with_server_speaks_mtls(daemon_factory, pki: Path, tmp_path: Path, capsys) -> None:
    """`evalfarm score --server` (the top-level CLI) takes the TLS flags and uses them."""
    from evalfarm.cli import main

    d = daemon_factory(tls_cert=pki / "server.pem", tls_key=pki / "server.key", tls_client_ca=pki / "ca.pem")
    cand = tmp_path / "cand.py"
    cand.write_text(fake_source("OK", 2.5))
    base = ["score", "--task", "L1/1", "--candidate", str(cand), "--server", d.target, "--json"]
    rc = main([*base, "--tls-ca", str(pki / "ca.pem"), "--tls-cert", str(pki / "client.pem"),
               "--tls-key", str(pki / "client.key"), "--timeout", "30"])
    out = capsys.readouterr().out
    assert rc == 0 and '"verdict": "OK"' in out and "2.5" in out
    assert main([*base, "--tls-ca", str(pki / "ca.pem"), "--timeout", "10"]) == 2  # no client cert: refused
    assert main([*base, "--tls-cert", str(pki / "client.pem")]) == 2  # cert without key: a usage error


def test_certificates_reload_without_restart(daemon_factory, pki: Path, tmp_path: Path) -> None:
    """A renewed certificate (here: signed by a new CA) is served on the next handshake."""
    ca2 = tmp_path / "pki2"
    ca2.mkdir()
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
         "-days", "1", "-subj", "/CN=test-ca-2", cwd=ca2)
    (ca2 / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
         "-subj", "/CN=server", cwd=ca2)
    _run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf", cwd=ca2)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki / "server.pem", cert)
    shutil.copy(pki / "server.key", key)
    d = daemon_factory(tls_cert=cert, tls_key=key)

    def capacity_with(ca: Path) -> bool:
        creds = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
        with grpc.secure_channel(d.target, creds) as ch:
            try:
                pb_grpc.EvalFarmStub(ch).Capacity(pb.CapacityRequest(), timeout=3)
                return True
            except grpc.RpcError:
                return False

    assert capacity_with(pki / "ca.pem") and not capacity_with(ca2 / "ca.pem")
    shutil.copy(ca2 / "server.key", key)
    shutil.copy(ca2 / "server.pem", cert)
    assert capacity_with(ca2 / "ca.pem") and not capacity_with(pki / "ca.pem")
    assert d.daemon.certs is not None and d.daemon.certs.reloads == 1
