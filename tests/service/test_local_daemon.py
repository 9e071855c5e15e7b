"""evalfarm.server.local: a loopback daemon owned by its caller."""

from __future__ import annotations

import pytest

from evalfarm.server.local import LocalDaemon, LocalDaemonError
from tests.sandbox_under_test import SANDBOX


def test_a_daemon_that_cannot_start_is_an_error_naming_its_log(tmp_path):
    log_path = tmp_path / "logs" / "daemon.log"
    with pytest.raises(LocalDaemonError, match="exited with code 2; see .*daemon.log"):
        LocalDaemon(cache_dir=tmp_path / "c", log_path=log_path, args=["--warm-judges", "9"], start_timeout_s=60)
    assert "--warm-judges must be 0-4" in log_path.read_text()


def test_a_started_daemon_is_stopped_with_its_process_group(tmp_path):
    with LocalDaemon(cache_dir=tmp_path / "c", log_path=tmp_path / "d.log", allow_weak_sandbox=not SANDBOX.strong) as d:
        assert d.proc.poll() is None and d.endpoint == f"127.0.0.1:{d.port}"
    assert d.proc.returncode == 0  # drained on SIGTERM


@pytest.mark.parametrize("kwargs", [{"device": "tpu"}, {"slots": 0}])
def test_bad_arguments_are_refused_before_starting(tmp_path, kwargs):
    with pytest.raises(ValueError):
        LocalDaemon(cache_dir=tmp_path, **kwargs)
