"""The seccomp filter (evalfarm.sandbox.seccomp): its program, run through a small classic-BPF interpreter
for both architectures, and the filter installed for real in a child process."""

from __future__ import annotations

import errno
import json
import platform
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from attack_scoring import RUNTIME, score_attack
from hypothesis import given
from hypothesis import strategies as st

from evalfarm import ScoreConfig, Verdict
from evalfarm.sandbox import seccomp
from evalfarm.scoring import as_task

REPO = Path(__file__).resolve().parents[2]
ALLOW = seccomp.SECCOMP_RET_ALLOW
EPERM = seccomp.SECCOMP_RET_ERRNO | errno.EPERM
ENOSYS = seccomp.SECCOMP_RET_ERRNO | errno.ENOSYS
THREAD_FLAGS = 0x3D0F00  # what glibc's pthread_create passes to clone


def run_filter(code: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """Interpret the program over one seccomp_data (only the opcodes the filter uses)."""
    insns = [struct.unpack("HBBI", code[i:i + 8]) for i in range(0, len(code), 8)]
    data = struct.pack("iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    acc, pc = 0, 0
    for _ in range(len(insns) + 1):
        op, jt, jf, k = insns[pc]
        if op == seccomp.BPF_LD_W_ABS:
            acc = struct.unpack_from("I", data, k)[0]
            pc += 1
        elif op == seccomp.BPF_RET_K:
            return k
        elif op in (seccomp.BPF_JMP_JEQ_K, seccomp.BPF_JMP_JGE_K, seccomp.BPF_JMP_JSET_K):
            taken = {seccomp.BPF_JMP_JEQ_K: acc == k, seccomp.BPF_JMP_JGE_K: acc >= k,
                     seccomp.BPF_JMP_JSET_K: bool(acc & k)}[op]
            pc += 1 + (jt if taken else jf)
        else:
            raise AssertionError(f"unexpected opcode {op:#x}")
    raise AssertionError("the program did not return")


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHES))
def test_program_refuses_the_listed_calls_and_allows_the_rest(machine):
    arch, _, numbers = seccomp.ARCHES[machine]
    code = seccomp.program(machine)
    assert len(code) // 8 < 256  # every jump offset fits
    for name in seccomp.DENIED:
        assert run_filter(code, numbers[name], arch) == EPERM, name
    assert run_filter(code, numbers["clone3"], arch) == ENOSYS
    assert run_filter(code, numbers["clone"], arch, THREAD_FLAGS) == ALLOW  # threads
    assert run_filter(code, numbers["clone"], arch, 0x11) == ALLOW  # fork (SIGCHLD)
    for flag in (0x10000000, 0x20000000, 0x40000000, 0x00020000, 0x00000080):  # NEWUSER, NEWPID, NEWNET, NEWNS, NEWTIME
        assert run_filter(code, numbers["clone"], arch, THREAD_FLAGS | flag) == EPERM, hex(flag)
    assert run_filter(code, 0, arch) == ALLOW  # read / io_setup
    other = 0x40000003 if arch != 0x40000003 else 0xC000003E  # i386 (int 0x80 on x86-64)
    assert run_filter(code, numbers["ptrace"], other) == EPERM
    assert run_filter(code, 0, other) == EPERM  # another entry is refused whole
    if machine == "x86_64":
        assert run_filter(code, seccomp.X32_SYSCALL_BIT | 0, arch) == EPERM  # x32 read


@given(nr=st.integers(min_value=0, max_value=1023), machine=st.sampled_from(sorted(seccomp.ARCHES)))
def test_any_other_call_is_allowed(nr, machine):
    arch, _, numbers = seccomp.ARCHES[machine]
    listed = {numbers[n] for n in (*seccomp.DENIED, "clone3")}
    if nr in listed or nr == numbers["clone"]:
        return
    assert run_filter(seccomp.program(machine), nr, arch) == ALLOW


CHILD = r"""
import ctypes, errno, json, os, subprocess, threading
from evalfarm.sandbox import seccomp
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nr = seccomp.ARCHES[__import__("platform").machine()][2]
go, done, box = threading.Event(), threading.Event(), {}
def earlier_thread():  # started before the filter: TSYNC must cover it
    go.wait()
    box["r"] = (libc.syscall(nr["ptrace"], 16, os.getppid(), 0, 0), ctypes.get_errno())
    done.set()
threading.Thread(target=earlier_thread).start()
note = seccomp.install()
go.set(); done.wait(10)
out = {"note": note, "earlier_thread": errno.errorcode.get(box["r"][1]) if box["r"][0] < 0 else "ok"}
for name in ("ptrace", "process_vm_readv", "perf_event_open", "unshare", "bpf"):
    r = libc.syscall(nr[name], 0, 0, 0, 0, 0, 0)
    out[name] = errno.errorcode.get(ctypes.get_errno()) if r < 0 else "ok"
out["subprocess"] = subprocess.run(["true"]).returncode
import torch
out["torch"] = float(torch.ones(256, 256).mm(torch.ones(256, 256)).sum())
print(json.dumps(out))
"""


@pytest.mark.skipif(platform.machine() not in seccomp.ARCHES, reason="architecture not covered")
def test_installed_filter_covers_every_thread_and_leaves_ordinary_work_alone():
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, cwd=REPO,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["note"].startswith("seccomp filter:"), out["note"]
    assert out["earlier_thread"] == "EPERM"
    for name in ("ptrace", "process_vm_readv", "perf_event_open", "unshare", "bpf"):
        assert out[name] == "EPERM", (name, out)
    assert out["subprocess"] == 0 and out["torch"] == 256.0 ** 3


@pytest.mark.skipif(platform.machine() not in seccomp.ARCHES, reason="architecture not covered")
def test_a_candidate_is_refused_those_calls_in_the_worker(data_dir, build_pool):
    task = as_task(str(data_dir / "task_scale.py"))
    cfg = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.5, min_timed_rounds=10)
    r = score_attack(task, RUNTIME / "syscall_prober.py", build_pool, cfg)
    assert r.verdict is Verdict.LOAD_ERROR and "SYSCALLS " in r.detail, (r.verdict, r.detail)
    found = json.loads(r.detail.rsplit("SYSCALLS ", 1)[1].split(" END", 1)[0])  # the message, not the source line
    assert found and all(v == "EPERM" for v in found.values()), found
    assert any(n.startswith("seccomp filter:") for n in r.evidence.isolation), r.evidence.isolation
