"""The host-wide GPU lease (evalfarm.judge.gpu_lease) and the wall budget that stops while a judge
waits for it (evalfarm.eval_budget.WallBudget). Processes, not threads, hold the leases here, as
judges do; the GPU itself is not needed (a lease is a lock on a file named by the GPU's id)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import stat
import threading
import time

import pytest

from evalfarm.config import ConfigError, ScoreConfig
from evalfarm.eval_budget import WallBudget
from evalfarm.judge import gpu_lease

GPU = "GPU-0a1b2c3d-0000-1111-2222-333344445555"


def _hold(directory: str, gpu: str, ready: mp.Event, release: mp.Event) -> None:  # type: ignore[valid-type]
    lease = gpu_lease.acquire(gpu, 5.0, directory=directory)
    ready.set()
    release.wait(30)
    lease.release()


@pytest.fixture
def holder(tmp_path):
    """Start a process that holds the lease on GPU until told to let go (or is killed)."""
    ctx = mp.get_context("spawn")
    started = []

    def start(gpu: str = GPU):
        ready, release = ctx.Event(), ctx.Event()
        proc = ctx.Process(target=_hold, args=(str(tmp_path / "leases"), gpu, ready, release), daemon=True)
        proc.start()
        assert ready.wait(60), "the holder never took its lease"
        started.append(proc)
        return proc, release

    yield start
    for proc in started:
        proc.kill()
        proc.join(10)


def test_a_free_gpu_is_leased_at_once_and_released(tmp_path):
    directory = str(tmp_path / "leases")
    lease = gpu_lease.acquire(GPU, 1.0, directory=directory)
    assert lease.waited_s < 0.5
    assert os.path.basename(lease.path) == f"{GPU}.lock"
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o1777  # every user's evaluations share it
    assert gpu_lease.holders(lease.path) == [os.getpid()]
    lease.release()
    assert gpu_lease.holders(lease.path) == []
    again = gpu_lease.acquire(GPU, 1.0, directory=directory)
    again.release()
    lease.release()  # twice is harmless


def test_a_leased_gpu_times_out_naming_the_holder_and_another_gpu_is_free(tmp_path, holder):
    proc, _ = holder()
    directory = str(tmp_path / "leases")
    told: list[str] = []
    t0 = time.monotonic()
    with pytest.raises(gpu_lease.LeaseTimeout) as err:
        gpu_lease.acquire(GPU, 0.5, on_wait=told.append, directory=directory)
    assert 0.5 <= time.monotonic() - t0 < 15  # bounded (room for a loaded machine)
    assert f"pid {proc.pid}" in str(err.value) and "gpu_lease_timeout_s" in str(err.value)
    assert len(told) == 1 and f"pid {proc.pid}" in told[0]  # told once, with who holds it
    other = gpu_lease.acquire("GPU-ffffffff-0000-1111-2222-333344445555", 0.5, directory=directory)
    other.release()


def test_the_waiter_gets_the_gpu_when_the_holder_lets_go(tmp_path, holder):
    _, release = holder()
    start = time.monotonic()
    release_after = 0.4
    threading.Timer(release_after, release.set).start()
    lease = gpu_lease.acquire(GPU, 20.0, directory=str(tmp_path / "leases"))
    assert release_after * 0.8 <= lease.waited_s <= time.monotonic() - start
    lease.release()


def test_a_killed_holder_leaves_no_lease_behind(tmp_path, holder):
    proc, _ = holder()
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    lease = gpu_lease.acquire(GPU, 5.0, directory=str(tmp_path / "leases"))
    lease.release()


def test_lease_names_are_safe_file_names(tmp_path):
    path = gpu_lease.lease_path("../../etc/x y", str(tmp_path))
    assert os.path.dirname(path) == str(tmp_path) and os.path.basename(path) == ".._.._etc_x_y.lock"
    with pytest.raises(ValueError):
        gpu_lease.lease_path("", str(tmp_path))


def test_the_lease_file_is_not_followed_through_a_link(tmp_path):
    directory = tmp_path / "leases"
    directory.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("")
    os.symlink(target, directory / f"{GPU}.lock")
    with pytest.raises(OSError):
        gpu_lease.acquire(GPU, 0.2, directory=str(directory))


def test_the_lease_directory_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(gpu_lease.LEASE_DIR_ENV, str(tmp_path))
    assert gpu_lease.lease_dir() == str(tmp_path)
    monkeypatch.delenv(gpu_lease.LEASE_DIR_ENV)
    assert gpu_lease.lease_dir() == gpu_lease.DEFAULT_LEASE_DIR


def test_the_lease_timeout_is_validated():
    assert ScoreConfig().gpu_lease_timeout_s == 600.0
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="gpu_lease_timeout_s"):
            ScoreConfig(gpu_lease_timeout_s=bad)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_wall_budget_stops_while_paused_and_goes_on_with_what_was_left():
    clock = FakeClock()
    budget = WallBudget(60.0, clock)
    clock.now += 20
    assert budget.left() == pytest.approx(40.0)
    budget.pause(600.0)  # a lease wait of at most 600 s begins with 40 s left
    clock.now += 500
    assert budget.left() == pytest.approx(140.0)  # still bounded: the wait's bound plus what was left
    budget.resume()
    assert budget.left() == pytest.approx(40.0)
    clock.now += 41
    assert budget.left() == 0.0
    budget.resume()  # not paused: nothing changes
    assert budget.left() == 0.0
