"""The bubblewrap sandbox (evalfarm.sandbox.bubblewrap): its command line, and what a process inside sees.

The tests that start a real sandbox skip where ``bwrap`` is missing or cannot start one here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from evalfarm.sandbox import bubblewrap, confine

BWRAP, WHY_NOT = (None, "")
try:
    BWRAP, WHY_NOT = bubblewrap.selected()
except bubblewrap.SandboxUnavailable as err:  # EVALFARM_SANDBOX=bubblewrap on a host without it
    WHY_NOT = str(err)
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason=f"no usable bubblewrap: {WHY_NOT}")


def test_mode_rejects_unknown_values(monkeypatch):
    monkeypatch.setenv(bubblewrap.MODE_ENV, "nsjail")
    with pytest.raises(bubblewrap.SandboxUnavailable, match="auto, bubblewrap, builtin"):
        bubblewrap.selected()


def test_builtin_mode_never_uses_bubblewrap(monkeypatch):
    monkeypatch.setenv(bubblewrap.MODE_ENV, "builtin")
    assert bubblewrap.selected() == (None, "bubblewrap not used: EVALFARM_SANDBOX=builtin")


def test_gpu_workers_get_bubblewrap_by_default_only_where_dev_shm_can_be_handed_over(monkeypatch):
    # A CUDA worker attaches the judge's arenas through files in the host's /dev/shm: only a root
    # daemon whose workers change uid can show it until then and cover it after.
    monkeypatch.setenv(bubblewrap.MODE_ENV, "auto")
    monkeypatch.setenv(confine.UID_ENV, "off")
    bwrap, note = bubblewrap.selected(gpu=True)
    assert bwrap is None and "EVALFARM_SANDBOX=bubblewrap forces it" in note
    monkeypatch.delenv(confine.UID_ENV)
    if os.geteuid() == 0 and BWRAP is not None:
        assert bubblewrap.selected(gpu=True)[0] == BWRAP
    elif os.geteuid() != 0:
        assert bubblewrap.selected(gpu=True)[0] is None
    monkeypatch.setenv(bubblewrap.MODE_ENV, "bubblewrap")
    if BWRAP is not None:
        assert bubblewrap.selected(gpu=True)[0] == BWRAP


def test_host_dev_shm_is_bound_only_with_the_capability_to_cover_it(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    view = bubblewrap.WorkerView(own_dir="/tmp/own", scratch_bytes=8 << 20, readable=(), host_shm_until_attach=True)
    args = bubblewrap.command("/usr/bin/bwrap", view, ["python3"])
    head = args[:args.index("--")]
    assert " ".join(head).count("--bind /dev/shm /dev/shm") == 1
    assert "--tmpfs /dev/shm" not in " ".join(head)
    assert head[head.index("CAP_SYS_ADMIN") - 1] == "--cap-add"
    assert "CAP_SYS_ADMIN until /dev/shm is covered" in bubblewrap.describe(view)
    assert bubblewrap.environment(view)[bubblewrap.SHM_ENV] == str(8 << 20)  # the worker's cover size
    assert "/dev/shm" not in bubblewrap.describe(view).split("of the host; ")[1]  # not among its tmpfs mounts
    plain = bubblewrap.command("/usr/bin/bwrap", bubblewrap.WorkerView(own_dir="/tmp/own", scratch_bytes=8 << 20,
                                                                       readable=()), ["python3"])
    assert "CAP_SYS_ADMIN" not in plain and "--tmpfs /dev/shm" in " ".join(plain)
    assert bubblewrap.SHM_ENV not in bubblewrap.environment(bubblewrap.WorkerView(
        own_dir="/tmp/own", scratch_bytes=8 << 20, readable=()))
    with pytest.raises(ValueError, match="unprivileged"):  # it would stay root with CAP_SYS_ADMIN
        bubblewrap.command("/usr/bin/bwrap", bubblewrap.WorkerView(
            own_dir="/tmp/own", scratch_bytes=8 << 20, readable=(), host_shm_until_attach=True,
            become_unprivileged=False), ["python3"])
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ValueError, match="root worker"):
        bubblewrap.command("/usr/bin/bwrap", view, ["python3"])


def test_required_bubblewrap_that_is_missing_is_an_error_and_auto_falls_back(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap here
    monkeypatch.setenv(bubblewrap.MODE_ENV, "bubblewrap")
    with pytest.raises(bubblewrap.SandboxUnavailable, match="bwrap not found on PATH"):
        bubblewrap.selected()
    monkeypatch.setenv(bubblewrap.MODE_ENV, "auto")
    assert bubblewrap.selected() == (None, "bubblewrap not used: bwrap not found on PATH")


def test_a_bwrap_that_cannot_start_a_sandbox_is_not_used(monkeypatch, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(bubblewrap.MODE_ENV, "auto")  # the suite may run with EVALFARM_SANDBOX=bubblewrap
    bwrap, note = bubblewrap.selected()
    assert bwrap is None and "No permissions to create new namespace" in note


def test_command_line(tmp_path):
    own = tmp_path / "run" / "candidate"
    (own / "evalfarm-ext").mkdir(parents=True)
    lib = tmp_path / "lib"
    (lib / "sub").mkdir(parents=True)
    view = bubblewrap.WorkerView(own_dir=str(own), scratch_bytes=16 << 20, keep=("evalfarm-ext",),
                                 readable=(str(lib), str(lib / "sub"), str(tmp_path / "missing")))
    args = bubblewrap.command("/usr/bin/bwrap", view, ["python", "-m", "x"])
    assert args[0] == "/usr/bin/bwrap" and args[-4:] == ["--", "python", "-m", "x"]
    assert "--unshare-net" in args and "--unshare-pid" in args and "--die-with-parent" in args
    pairs = list(zip(args, args[1:], args[2:], strict=False))
    assert ("--ro-bind", str(lib), str(lib)) in pairs
    assert ("--ro-bind", str(lib / "sub"), str(lib / "sub")) not in pairs  # inside an outer bind
    assert str(tmp_path / "missing") not in args
    assert ("--tmpfs", str(own), "--bind") in pairs  # own directory: a tmpfs, then the kept subdir
    assert ("--bind", str(own / "evalfarm-ext"), str(own / "evalfarm-ext")) in pairs
    at = next(i for i in range(len(args) - 1) if args[i:i + 2] == ["--tmpfs", str(own)])
    assert args[at - 2:at] == ["--size", str(16 << 20)]
    assert ("--chmod", "0755", str(tmp_path / "run")) in pairs  # a directory bubblewrap made on the way
    assert args[args.index("--chdir") + 1] == str(own)
    if os.geteuid() == 0:
        assert ("--cap-add", "CAP_SETUID", "--cap-add") in pairs and "--unshare-user" not in args
    else:
        assert "--unshare-user" in args and "--disable-userns" in args
    shared = bubblewrap.command("bwrap", bubblewrap.WorkerView(str(own), 1 << 20, (), network=True), ["true"])
    assert "--unshare-net" not in shared


def test_exit_signal():
    assert bubblewrap.exit_signal(128 + signal.SIGKILL) == signal.SIGKILL
    assert bubblewrap.exit_signal(1) is None and bubblewrap.exit_signal(None) is None


PROBE = r"""
import json, os, socket, sys
out = {"uid": os.getuid(), "cwd": os.getcwd()}
out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
try:
    out["secret"] = open(sys.argv[1]).read()
except OSError as err:
    out["secret"] = f"<{type(err).__name__}>"
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2).close()
    out["net"] = "connected"
except OSError as err:
    out["net"] = f"<{type(err).__name__}>"
written = {}
for where in ("/tmp", os.getcwd()):
    n = 0
    try:
        with open(os.path.join(where, "fill"), "wb") as f:
            for _ in range(64):
                f.write(b"\0" * (1 << 20)); f.flush(); n += 1
    except OSError as err:
        written[where] = (n, err.strerror)
    else:
        written[where] = (n, "not refused")
out["written"] = written
with open(os.path.join(os.getcwd(), "evalfarm-ext", "kept"), "w") as f:
    f.write("kept")
try:
    os.unshare(0x10000000)  # CLONE_NEWUSER
    out["userns"] = "created"
except (OSError, AttributeError) as err:
    out["userns"] = f"<{type(err).__name__}>"
print(json.dumps(out))
"""


@needs_bwrap
def test_inside_no_secret_no_network_no_host_process_and_bounded_scratch(tmp_path):
    secret = tmp_path / "token"
    secret.write_text("s3cr3t")
    own = tmp_path / "own"
    (own / "evalfarm-ext").mkdir(parents=True)
    for d in (tmp_path, own, own / "evalfarm-ext"):
        os.chmod(d, 0o777)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    view = bubblewrap.WorkerView(own_dir=str(own), scratch_bytes=8 << 20, keep=("evalfarm-ext",),
                                 readable=tuple(confine.needed_paths()))
    argv = bubblewrap.command(BWRAP, view, [sys.executable, "-c", PROBE, str(secret), str(listener.getsockname()[1])])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    listener.close()
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["secret"] == "<FileNotFoundError>"  # the host's files outside the view are not there
    assert found["net"].startswith("<"), found["net"]
    assert max(found["pids"]) < 10, found["pids"]  # its own PID namespace: no host process
    assert found["cwd"] == str(own)
    for where, (mib, why) in found["written"].items():
        assert mib <= 8 and why == "No space left on device", (where, mib, why)
    assert (own / "evalfarm-ext" / "kept").read_text() == "kept"  # the kept directory is the host's
    assert not (own / "fill").exists()  # the rest of its directory was a tmpfs, gone with it
    if os.geteuid() != 0:
        assert found["userns"].startswith("<"), found["userns"]


@needs_bwrap
def test_everything_inside_dies_with_bubblewrap(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    os.chmod(own, 0o777)
    marker = f"evalfarm-bwrap-test-{os.getpid()}-{time.monotonic_ns()}"
    view = bubblewrap.WorkerView(own_dir=str(own), scratch_bytes=1 << 20, readable=tuple(confine.needed_paths()))
    script = ("import os, subprocess, sys, time\n"
              f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', {marker!r}], start_new_session=True)\n"
              "print('ready', flush=True); time.sleep(300)\n")
    proc = subprocess.Popen(bubblewrap.command(BWRAP, view, [sys.executable, "-c", script]),
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

    def alive() -> list[int]:
        out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False).stdout
        return [int(p) for p in out.split()]

    assert alive(), "the detached child did not start"
    os.kill(proc.pid, signal.SIGKILL)  # bubblewrap alone, not its group
    proc.wait(10)
    deadline = time.monotonic() + 10
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(), "a process started inside outlived bubblewrap"


def test_an_evaluation_that_requires_bubblewrap_without_it_is_an_infra_error_naming_why(
        data_dir, build_pool, monkeypatch, tmp_path):
    from evalfarm import ScoreConfig, Verdict
    from evalfarm.scoring import as_candidate, as_task, score

    monkeypatch.setenv("PATH", str(tmp_path))  # the judge inherits it: no bwrap to be found
    monkeypatch.setenv(bubblewrap.MODE_ENV, "bubblewrap")
    cfg = ScoreConfig(num_correctness_inputs=5, timing_budget_s=0.2, min_timed_rounds=10)
    r = score(as_task(str(data_dir / "task_scale.py")), as_candidate(str(data_dir / "cand_same.py")), cfg,
              build_pool=build_pool)
    assert r.verdict is Verdict.INFRA_ERROR, (r.verdict, r.detail)
    assert "EVALFARM_SANDBOX=bubblewrap but bubblewrap cannot be used: bwrap not found on PATH" in r.detail


def _fake_toolchain(root) -> str:
    """A compiler installed outside /usr, as hosts with a vendor toolchain have it (/opt/gcc):
    bin/g++ runs a helper from the tree's libexec, as gcc's driver runs cc1plus."""
    (root / "bin").mkdir(parents=True)
    (root / "libexec").mkdir()
    (root / "libexec" / "cc1plus").write_text("#!/bin/sh\necho compiled \"$@\"\n")
    gxx = root / "bin" / "g++"
    gxx.write_text(f"#!/bin/sh\nexec {root}/libexec/cc1plus \"$@\"\n")
    for p in (gxx, root / "libexec" / "cc1plus"):
        p.chmod(0o755)
    for d in (root, root.parent):
        os.chmod(d, 0o755)
    return str(gxx)


def test_toolchain_paths_name_the_compilers_tree_never_a_home(tmp_path, monkeypatch):
    gxx = _fake_toolchain(tmp_path / "opt" / "gcc")
    libs = tmp_path / "opt" / "gcc" / "lib64"
    libs.mkdir()
    env = {"CXX": f"{gxx} -fdiagnostics-color", "PATH": "/nonexistent", "LD_LIBRARY_PATH": f"{libs}:relative:/missing"}
    found = confine.toolchain_paths(env)
    assert str(tmp_path / "opt" / "gcc") in found and str(libs) in found
    assert "relative" not in found and "/missing" not in found
    # A compiler in a home's bin gives that bin, not the home.
    home = tmp_path / "home"
    home_gxx = _fake_toolchain(home)
    monkeypatch.setenv("HOME", str(home))
    assert confine.toolchain_paths({"CC": home_gxx, "PATH": "/nonexistent"}) == [str(home / "bin")]


@needs_bwrap
def test_a_compiler_outside_usr_runs_inside_the_build_sandbox(tmp_path, monkeypatch):
    gxx = _fake_toolchain(tmp_path / "opt" / "gcc")
    monkeypatch.setenv("CXX", gxx)
    own = tmp_path / "build"
    own.mkdir()
    view = bubblewrap.WorkerView(own_dir=str(own), scratch_bytes=8 << 20, readable=tuple(confine.needed_paths()),
                                 own_dir_tmpfs=False, become_unprivileged=False)
    proc = subprocess.run(bubblewrap.command(BWRAP, view, [gxx, "-c", "main.cpp"]), capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "compiled -c main.cpp", proc.stderr


COVER = r"""
import json, os, sys
from evalfarm.sandbox import confine
out = {"before": sorted(os.listdir("/dev/shm"))}
out["notes"] = confine.cover_host_shm(4 << 20)
out["after"] = sorted(os.listdir("/dev/shm"))
notes = confine.drop_privileges(65534, 65534, writable=[os.getcwd()], needed=[])
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
out["cap_eff"], out["cap_prm"] = status["CapEff"].strip(), status["CapPrm"].strip()
n = 0
try:
    with open("/dev/shm/fill", "wb") as f:
        for _ in range(16):
            f.write(b"\0" * (1 << 20)); f.flush(); n += 1
except OSError as err:
    out["fill"] = (n, err.strerror)
try:
    confine.cover_host_shm(4 << 20)
    out["again"] = "mounted"
except OSError as err:
    out["again"] = str(err)
print(json.dumps(out))
"""


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the /dev/shm hand-over is for a root daemon's workers")
def test_host_dev_shm_is_covered_before_privileges_are_dropped_and_stays_covered(tmp_path):
    # What a CUDA worker inside bubblewrap does after attaching its arenas: the host's /dev/shm
    # (where CUDA IPC keeps its files) disappears under a private tmpfs, the capability that did it
    # goes with the uid change, and what it writes there is bounded and never reaches the host.
    marker = f"/dev/shm/evalfarm-test-{os.getpid()}-{time.monotonic_ns()}"
    open(marker, "w").close()
    own = tmp_path / "own"
    own.mkdir()
    os.chmod(own, 0o777)
    try:
        view = bubblewrap.WorkerView(own_dir=str(own), scratch_bytes=4 << 20, readable=tuple(confine.needed_paths()),
                                     host_shm_until_attach=True)
        proc = subprocess.run(bubblewrap.command(BWRAP, view, [sys.executable, "-c", COVER]),
                              capture_output=True, text=True, timeout=60, check=False,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert proc.returncode == 0, proc.stderr
        found = json.loads(proc.stdout.strip().splitlines()[-1])
        assert os.path.basename(marker) in found["before"]  # the host's, as CUDA IPC needs
        assert found["after"] == [] and "private 4 MiB tmpfs" in found["notes"][0]
        assert int(found["cap_eff"], 16) == 0 and int(found["cap_prm"], 16) == 0, found
        assert found["fill"][0] <= 4 and found["fill"][1] == "No space left on device", found["fill"]
        assert "could not cover" in found["again"], found["again"]  # no capability left to undo it
        assert not os.path.exists("/dev/shm/fill")  # nothing it wrote reached the host
    finally:
        os.unlink(marker)
