"""Hostile-tenant tests for the sandbox (issue 18, findings 1, 2, 4, 7 and 8) on CPU, real processes.

Each candidate gathers what it can reach and raises it in an exception, so everything it found
comes back in the verdict's detail: the test then checks that no secret is in there.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from attack_scoring import score_attack

from evalfarm import ScoreConfig, Verdict
from evalfarm.sandbox import bubblewrap, lifetime
from evalfarm.scoring import as_task

QUICK = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.5, min_timed_rounds=14, check_other_sizes=False)
ROOT = os.geteuid() == 0

SNOOP = r'''
import json, os
import torch.nn as nn

def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read(100000).decode("utf-8", "replace")
    except OSError as err:
        return f"<{type(err).__name__}>"

def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0

found = {"uid": os.getuid(), "environ": dict(os.environ), "parents": [], "pids": sorted(
    int(p) for p in os.listdir("/proc") if p.isdigit())}
pid = os.getpid()
for _ in range(6):
    pid = _ppid(pid)
    if pid <= 0:
        break
    found["parents"].append({"pid": pid, "environ": _read(f"/proc/{pid}/environ"),
                             "cmdline": _read(f"/proc/{pid}/cmdline"), "mem": _read(f"/proc/{pid}/mem")[:20]})
found["token"] = _read(TOKEN_PATH)
raise RuntimeError("FOUND" + json.dumps(found) + "END")

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
    def forward(self, x):
        return x
'''


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_scale.py"))


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A secret in the caller's environment and a token file only its owner can read."""
    secret = "s3cr3t-" + secrets.token_hex(8)
    token = tmp_path / "farm-token"
    token.write_text("tok-" + secrets.token_hex(8))
    token.chmod(0o600)
    monkeypatch.setenv("EVALFARM_TEST_PLANTED_SECRET", secret)
    monkeypatch.setenv("EVALFARM_TEST_TOKEN_FILE", str(token))
    return secret, token


def _found(detail: str) -> dict:
    assert "FOUND" in detail, detail
    return json.loads(detail.rsplit("FOUND", 1)[1].rsplit("END", 1)[0])


def test_candidate_finds_no_secret_in_its_or_its_parents_environment(task, build_pool, planted):
    secret, token = planted
    r = score_attack(task, SNOOP.replace("TOKEN_PATH", repr(str(token))), build_pool, QUICK)
    assert r.verdict is Verdict.LOAD_ERROR, (r.verdict, r.detail)
    assert secret not in r.detail
    assert str(token) not in r.detail, "the token file's path reached the candidate"
    assert token.read_text() not in r.detail
    found = _found(r.detail)
    assert "EVALFARM_TEST_PLANTED_SECRET" not in found["environ"]
    assert set(found["environ"]) <= {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "TORCH_EXTENSIONS_DIR", "PYTHONPATH",
                                     "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE", "OMP_NUM_THREADS", "OMP_WAIT_POLICY",
                                     "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "CUDA_HOME", "CUDA_PATH",
                                     "CXX", "CC", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "EVALFARM_SANDBOX_UID",
                                     "EVALFARM_WORKER_POISON", "EVALFARM_WORKER_NETNS", "EVALFARM_WORKER_PIDNS",
                                     "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CUDA_DEVICE_ORDER",
                                     "TORCHINDUCTOR_CACHE_DIR",  # torch sets this one itself
                                     "EVALFARM_SANDBOXED_BY", "EVALFARM_SANDBOX_NOTE",  # the sandbox's evidence note
                                     "PWD"}  # bubblewrap's --chdir


@pytest.mark.skipif(not ROOT, reason="the PID namespace and the uid change need root")
@pytest.mark.parametrize("sandbox_mode", ["auto", "builtin"])
def test_root_worker_sees_no_judge_and_runs_unprivileged(task, build_pool, planted, sandbox_mode, monkeypatch):
    # Finding 4: the judge's memory and environment; the worker's parents in /proc.
    # "auto" is bubblewrap where the host has it; "builtin" is the fallback (evalfarm.sandbox.confine).
    monkeypatch.setenv(bubblewrap.MODE_ENV, sandbox_mode)
    secret, token = planted
    r = score_attack(task, SNOOP.replace("TOKEN_PATH", repr(str(token))), build_pool, QUICK)
    found = _found(r.detail)
    assert found["uid"] != 0
    assert found["pids"] and max(found["pids"]) < 100, f"host processes visible: {found['pids'][:20]}"
    for parent in found["parents"]:  # only the namespace's own init, if anything
        assert parent["pid"] == 1 and not any(j in parent["cmdline"] for j in ("evalfarm.judge.launch", "evalfarm.judge.judge"))
        assert parent["environ"].startswith("<"), "the parent's environment was readable"
        assert parent["mem"].startswith("<")
    assert found["token"].startswith("<")
    assert "judge not dumpable" in r.evidence.isolation
    ok = score_attack(task, Path(__file__).parents[1] / "data" / "cand_same.py", build_pool, QUICK)
    assert ok.verdict is Verdict.OK, ok.detail  # the evidence names what was in force
    assert any("PID namespace with its own /proc" in note for note in ok.evidence.isolation), ok.evidence.isolation
    assert any(note.startswith("unprivileged uid 65534") for note in ok.evidence.isolation), ok.evidence.isolation
    # The process cap binds once the uid is not root; the evidence does not also say it does not.
    assert "process limit 4096" in ok.evidence.isolation
    assert not any(note.startswith("no process limit") for note in ok.evidence.isolation), ok.evidence.isolation


COMPILE = '''
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

mod = load_inline(name=NAME, cpp_sources=SRC, functions=["f"])

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
    def forward(self, x):
        return mod.f(x)
'''


def _compile_attack(src: str, tag: str) -> str:
    return COMPILE.replace("NAME", repr(f"evalfarm_sbx_{tag}_{secrets.token_hex(4)}")).replace("SRC", repr(src))


def test_including_the_token_file_does_not_quote_it(task, build_pool, planted):
    # Finding 2: a direct #include is refused before the compiler starts.
    _, token = planted
    body = "\ntorch::Tensor f(torch::Tensor x) { return x; }"
    r = score_attack(task, _compile_attack(f'#include "{token}"' + body, "direct"), build_pool, QUICK)
    assert r.verdict is Verdict.COMPILE_ERROR, (r.verdict, r.detail)
    assert "outside the extension's build directory" in r.detail
    assert token.read_text() not in r.detail
    # Through a computed include the compiler reads it; its diagnostics lose their text.
    src = f"#define Q(x) #x\n#define P(x) Q(x)\n#include P({token})" + body
    r = score_attack(task, _compile_attack(src, "computed"), build_pool, QUICK)
    assert r.verdict is Verdict.COMPILE_ERROR, (r.verdict, r.detail)
    assert token.read_text() not in r.detail
    if bubblewrap.selected()[0] is not None:  # inside bubblewrap the file is not there to read at all
        assert "No such file or directory" in r.detail, r.detail
    else:
        assert "withheld" in r.detail


def test_including_dev_zero_is_a_quick_compile_error(task, build_pool):
    t0 = time.monotonic()
    src = '#include "/dev/zero"\ntorch::Tensor f(torch::Tensor x) { return x; }'
    r = score_attack(task, _compile_attack(src, "zero"), build_pool, QUICK)
    assert r.verdict is Verdict.COMPILE_ERROR, (r.verdict, r.detail)
    assert "/dev/zero" in r.detail
    assert time.monotonic() - t0 < 30


ESCAPE = '''
import subprocess, sys
import torch
import torch.nn as nn

# A new session, detached from everything, as webbrowser.BackgroundBrowser does it.
subprocess.Popen(["sleep", "300", MARKER], start_new_session=True, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
    def forward(self, x):
        return torch.relu(x) * self.scale + self.bias
'''


def _with_marker(marker: str) -> list[int]:
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{p}/cmdline").read_bytes():
                    pids.append(int(p))
            except OSError:
                pass
    return pids


def _run_dirs() -> set[str]:
    import tempfile

    found = set()
    for base in (tempfile.gettempdir(), "/dev/shm"):
        if os.path.isdir(base):
            found |= {os.path.join(base, n) for n in os.listdir(base) if n.startswith(lifetime.PREFIX)}
    return found


@pytest.mark.exclusive  # compares the temp root's run directories before and after
def test_a_detached_process_dies_with_the_verdict_and_no_file_is_left(task, build_pool):
    # Findings 7 and 8: a setsid()'d child outlived an OK verdict; temp dirs and arenas stayed.
    marker = "evalfarm-escape-" + secrets.token_hex(6)
    before = _run_dirs()
    r = score_attack(task, ESCAPE.replace("MARKER", repr(marker)), build_pool, QUICK)
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    deadline = time.monotonic() + 5
    while _with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _with_marker(marker), "a process the candidate started outlived its evaluation"
    assert _run_dirs() <= before


def test_sweep_removes_only_run_directories_whose_owner_is_gone(tmp_path):
    alive = lifetime.RunDir("eval", root=str(tmp_path))
    dead_root = tmp_path / "dead"
    code = ("import sys, os; from evalfarm.sandbox import lifetime; r = lifetime.RunDir('eval', root=sys.argv[1]); "
            "open(os.path.join(r.path, 'big'), 'wb').write(b'x' * 1000); print(r.path); "
            "sys.stdout.flush(); os._exit(0)")
    dead_root.mkdir()
    out = subprocess.run([os.sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}, check=True)
    dead_path = out.stdout.strip()
    assert os.path.isdir(dead_path)
    removed = lifetime.sweep(str(tmp_path))
    assert dead_path in removed and not os.path.exists(dead_path)
    assert os.path.isdir(alive.path)
    alive.close()
    assert not os.path.exists(alive.path)
