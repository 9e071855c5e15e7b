"""The daemon's start-up sandbox check (issue 42): it refuses to serve untrusted candidates
without the strong sandbox, in one line naming what is missing and the fix; with
--allow-weak-sandbox it serves and says so in every result and in `evalfarm status`."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from evalfarm.client.cli import run_status
from evalfarm.sandbox import bubblewrap, confine, isolation
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc
from tests.service.conftest import REPO, descendants, request, wait_until

HERE = isolation.assess("cpu")


def _serve(*args: str, env: dict[str, str] | None = None, user: tuple[int, int] | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "evalfarm", "serve", "--port", "0", *args]
    if user is not None:
        cmd = [shutil.which("setpriv") or "setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", *cmd]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def _env_without_bwrap(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test's environment with a PATH on which there is no bwrap (and nothing else)."""
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALFARM_")}
    return {**env, "PATH": str(empty), "PYTHONPATH": str(REPO), "HOME": str(tmp_path), **extra}


# -- the check itself (evalfarm.sandbox.isolation) ------------------------------------------------------

def test_without_bwrap_the_sandbox_is_weak_and_the_fix_is_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(bubblewrap.MODE_ENV, raising=False)
    found = isolation.assess("cpu")
    assert not found.strong
    assert "bwrap not found on PATH" in found.summary() and found.summary().startswith("WEAK: ")
    assert found.fix.startswith("install bubblewrap")
    line = found.refusal()
    assert "\n" not in line and "--allow-weak-sandbox" in line and "install bubblewrap" in line


@pytest.mark.parametrize(("var", "value", "missing"), [
    (bubblewrap.MODE_ENV, "builtin", "EVALFARM_SANDBOX=builtin"),
    (confine.NETNS_ENV, "0", "host's network"),
])
def test_each_switch_that_weakens_the_sandbox_makes_it_weak(monkeypatch, var, value, missing):
    monkeypatch.setenv(var, value)
    found = isolation.assess("cpu")
    assert not found.strong and missing in found.summary(), found.summary()
    assert f"unset {var}" in found.fix


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid change is a root daemon's")
def test_candidates_that_stay_root_are_weak(monkeypatch):
    monkeypatch.setenv(confine.UID_ENV, "off")
    found = isolation.assess("cpu")
    assert not found.strong and "stays root" in found.summary()
    monkeypatch.setenv(confine.UID_ENV, "nobody")  # not a number: weak, and said so (no traceback)
    found = isolation.assess("cuda")
    assert not found.strong and "is not uid[:gid]" in found.summary() and found.fix.startswith("unset")


def test_a_gpu_daemon_that_is_not_root_is_weak_and_told_to_run_as_root(monkeypatch):
    # A CUDA worker's arenas need the /dev/shm hand-over, which only a root daemon can make.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv(bubblewrap.MODE_ENV, raising=False)
    found = isolation.assess("cuda")
    assert not found.strong
    assert "CUDA workers run without bubblewrap" in found.summary()
    assert found.fix.startswith("run the daemon as root")


@pytest.mark.skipif(not HERE.strong, reason=f"this host has no strong sandbox: {HERE.summary()}")
def test_this_host_gives_the_strong_sandbox():
    assert HERE.summary().startswith("strong: bubblewrap for builds and workers")
    assert HERE.build == HERE.worker == "bubblewrap"


# -- the daemon's start -----------------------------------------------------------------------

def test_the_daemon_refuses_to_start_without_bubblewrap(tmp_path):
    r = _serve("--device", "cpu", "--cache-dir", str(tmp_path / "cache"), env=_env_without_bwrap(tmp_path))
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("evalfarm serve: error:")]
    assert len(errors) == 1, r.stderr
    assert "no strong sandbox" in errors[0] and "bwrap not found on PATH" in errors[0]
    assert "install bubblewrap" in errors[0] and "--allow-weak-sandbox" in errors[0]
    assert "listening on" not in r.stdout


def _reachable_by_others(path: Path) -> bool:
    """Whether another user can reach ``path``: every directory above it searchable by others."""
    return all(d.stat().st_mode & 0o001 for d in [path.resolve(), *path.resolve().parents])


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="starts the daemon as another user (needs root and setpriv)")
@pytest.mark.skipif(not _reachable_by_others(REPO) or not _reachable_by_others(Path(sys.executable).parent),
                    reason="the checkout or the interpreter is in a directory other users cannot enter")
def test_a_daemon_started_as_a_user_without_bubblewrap_refuses(tmp_path):
    tmp_path.chmod(0o777)
    r = _serve("--device", "cpu", "--cache-dir", str(tmp_path / "cache"), env=_env_without_bwrap(tmp_path),
               user=(65534, 65534))
    assert r.returncode == 2, r.stderr
    assert "no strong sandbox" in r.stderr and "the daemon's own uid and files" in r.stderr, r.stderr


def test_the_config_file_key_serves_weak_and_every_result_and_status_say_so(tmp_path, data_dir, capsys):
    config = tmp_path / "farm.toml"
    config.write_text("allow-weak-sandbox = true\n")
    env = _env_without_bwrap(tmp_path)
    cmd = [sys.executable, "-m", "evalfarm", "serve", "--config", str(config), "--port", "0", "--device", "cpu",
           "--cache-dir", str(tmp_path / "cache"), "--warm-judges", "0"]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        from evalfarm.server.cli import wait_for_listening_port

        port = wait_for_listening_port(proc, 60)
        assert port is not None
        target = f"127.0.0.1:{port}"
        with grpc.insecure_channel(target) as ch:
            stub = pb_grpc.EvalFarmStub(ch)
            cap = stub.Capacity(pb.CapacityRequest(), timeout=10)
            assert cap.sandbox.startswith("WEAK: ") and "(served with --allow-weak-sandbox)" in cap.sandbox
            req = request((data_dir / "cand_same.py").read_text(), num_correctness_inputs=10, timing_budget_s=0.3)
            req.task.source.source = (data_dir / "task_scale.py").read_bytes()
            req.task.source.name = "task_scale"
            sample = stub.Score(req, timeout=300)
        assert json.loads(sample.evidence_json)["evidence"]["sandbox"] == cap.sandbox
        assert run_status(argparse.Namespace(server=target, json=False, token_file=None, timeout=10,
                                             health_only=False)) == 0
        assert f"sandbox {cap.sandbox}" in capsys.readouterr().out
    finally:
        os.killpg(proc.pid, 15)
        _, err = proc.communicate(timeout=60)
    warnings = [ln for ln in err.splitlines() if "WARNING: serving untrusted candidates with a weak sandbox" in ln]
    assert len(warnings) == 1 and "Fix: install bubblewrap" in warnings[0], err[-3000:]


@pytest.mark.skipif(not HERE.strong, reason=f"this host has no strong sandbox: {HERE.summary()}")
def test_a_strong_daemon_says_so_and_its_judges_require_bubblewrap(spawn_daemon):
    d = spawn_daemon("--warm-judges", "1")
    with grpc.insecure_channel(d.target) as ch:
        cap = pb_grpc.EvalFarmStub(ch).Capacity(pb.CapacityRequest(), timeout=10)
    assert cap.sandbox == HERE.summary()
    assert "event=sandbox strong=true" in d.log()

    def judges() -> list[int]:
        return [p for p in descendants(d.pid) if b"evalfarm.judge.launch" in _read(f"/proc/{p}/cmdline")]

    assert wait_until(judges, 60), "no judge started ahead"
    # No evaluation of this daemon falls back to a weaker sandbox: a judge that cannot have
    # bubblewrap ends its evaluation with INFRA_ERROR instead (EVALFARM_SANDBOX=bubblewrap).
    environ = _read(f"/proc/{judges()[0]}/environ").split(b"\0")
    assert f"{bubblewrap.MODE_ENV}=bubblewrap".encode() in environ


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


# -- a contributor's test run ------------------------------------------------------------------

def test_make_test_installs_bubblewrap_first_or_says_loudly_it_cannot(tmp_path):
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert recipe[0].strip() == "bash scripts/ensure_bubblewrap.sh $(PY)"  # before ruff and pytest
    tools = tmp_path / "bin"  # a machine with a shell but neither bwrap nor apt-get
    tools.mkdir()
    for name in ("bash", "sh", "id", "timeout", "env"):
        (tools / name).symlink_to(shutil.which(name))
    r = subprocess.run(["bash", str(REPO / "scripts" / "ensure_bubblewrap.sh"), sys.executable], cwd=REPO,
                       env={"PATH": str(tools), "PYTHONPATH": str(REPO), "HOME": str(tmp_path)},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "The real sandbox is NOT tested on this machine" in r.stdout and "bwrap not found on PATH" in r.stdout
    assert "Fix: install bubblewrap" in r.stdout
