"""A seccomp filter for processes that run candidate code: system calls no kernel needs refused.

Installed by the candidate and reference workers (after their set-up, before any task or
candidate code runs) and by the build runner's children (before the candidate's module runs or
the compiler starts), in every sandbox mode. It is a deny-list: calls that read or write another
process's memory (``ptrace``, ``process_vm_readv``/``writev``), performance counters
(``perf_event_open``, a timing side channel), kernel attack surface no kernel needs
(``bpf``, ``userfaultfd``, ``io_uring_*``, keyrings, module loading, ``kexec``), and every way
to make or enter namespaces (``unshare``, ``setns``, ``clone`` with a namespace flag; ``clone3``,
whose flags a filter cannot read, answers ENOSYS so that the C library falls back to ``clone``),
plus ``mount``-family calls. Each refused call fails with EPERM (ENOSYS for ``clone3``); nothing
is killed. A call made through another architecture's entry (32-bit ``int 0x80`` on x86-64, the
x32 ABI) is refused as a whole, so the table cannot be bypassed by renumbering.

The filter is synchronised to every thread of the process (``SECCOMP_FILTER_FLAG_TSYNC``), so
a thread pool started before it (OpenMP, torch's intra-op pool) runs candidate callbacks under it
too; it needs ``PR_SET_NO_NEW_PRIVS``, which it sets. Architectures: x86-64 and aarch64; on any
other the filter is not installed and the note says so.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# Classic BPF opcodes and seccomp constants (linux/filter.h, linux/seccomp.h, linux/audit.h).
BPF_LD_W_ABS = 0x20
BPF_JMP_JEQ_K = 0x15
BPF_JMP_JGE_K = 0x35
BPF_JMP_JSET_K = 0x45
BPF_RET_K = 0x06
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
PR_SET_NO_NEW_PRIVS = 38
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0 = 0, 4, 16
# Every CLONE_NEW* flag: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
CLONE_NAMESPACE_FLAGS = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 \
    | 0x20000000 | 0x40000000
X32_SYSCALL_BIT = 0x40000000

DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "perf_event_open", "bpf", "userfaultfd",
          "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key",
          "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "unshare", "setns",
          "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig",
          "fspick", "swapon", "swapoff", "reboot", "acct", "quotactl", "syslog", "open_by_handle_at",
          "name_to_handle_at")

# name -> (audit arch, the seccomp syscall's number, {syscall name: number}).
ARCHES: dict[str, tuple[int, int, dict[str, int]]] = {
    "x86_64": (0xC000003E, 317, {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "perf_event_open": 298, "bpf": 321,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "keyctl": 250, "add_key": 248, "request_key": 249, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "unshare": 272, "setns": 308,
        "mount": 165, "umount2": 166, "pivot_root": 155, "move_mount": 429, "open_tree": 428, "fsopen": 430,
        "fsmount": 432, "fsconfig": 431, "fspick": 433, "swapon": 167, "swapoff": 168, "reboot": 169,
        "acct": 163, "quotactl": 179, "syslog": 103, "open_by_handle_at": 304, "name_to_handle_at": 303,
        "clone": 56, "clone3": 435}),
    "aarch64": (0xC00000B7, 277, {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "perf_event_open": 241, "bpf": 280,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "keyctl": 219, "add_key": 217, "request_key": 218, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "kexec_load": 104, "kexec_file_load": 294, "unshare": 97, "setns": 268,
        "mount": 40, "umount2": 39, "pivot_root": 41, "move_mount": 429, "open_tree": 428, "fsopen": 430,
        "fsmount": 432, "fsconfig": 431, "fspick": 433, "swapon": 224, "swapoff": 225, "reboot": 142,
        "acct": 89, "quotactl": 60, "syslog": 116, "open_by_handle_at": 265, "name_to_handle_at": 264,
        "clone": 220, "clone3": 435}),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def program(machine: str) -> bytes:
    """The filter for ``machine`` (platform.machine()), as packed ``struct sock_filter``s."""
    arch, _, numbers = ARCHES[machine]
    eperm = SECCOMP_RET_ERRNO | errno.EPERM
    body: list[bytes] = []
    # Each denied number: "if nr == N return EPERM" is two instructions (jeq; ret).
    for name in DENIED:
        body += [_insn(BPF_JMP_JEQ_K, numbers[name], 0, 1), _insn(BPF_RET_K, eperm)]
    body += [_insn(BPF_JMP_JEQ_K, numbers["clone3"], 0, 1), _insn(BPF_RET_K, SECCOMP_RET_ERRNO | errno.ENOSYS)]
    # clone: refused when any namespace flag is set in its first argument (the flags' low word).
    body += [_insn(BPF_JMP_JEQ_K, numbers["clone"], 0, 3),
             _insn(BPF_LD_W_ABS, OFFSET_ARG0),
             _insn(BPF_JMP_JSET_K, CLONE_NAMESPACE_FLAGS, 0, 1),
             _insn(BPF_RET_K, eperm)]
    body.append(_insn(BPF_RET_K, SECCOMP_RET_ALLOW))
    head = [_insn(BPF_LD_W_ABS, OFFSET_ARCH),
            _insn(BPF_JMP_JEQ_K, arch, 1, 0),  # the native entry: go on; any other: refused
            _insn(BPF_RET_K, eperm),
            _insn(BPF_LD_W_ABS, OFFSET_NR)]
    if machine == "x86_64":  # the x32 ABI shares the arch value; its numbers carry this bit
        head += [_insn(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1), _insn(BPF_RET_K, eperm)]
    return b"".join(head + body)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> str:
    """Install the filter on every thread of this process; the evidence note (never raises)."""
    machine = platform.machine()
    if machine not in ARCHES:
        return f"no seccomp filter: architecture {machine} not covered"
    if os.environ.get("EVALFARM_SECCOMP", "1") == "0":
        return "no seccomp filter: turned off (EVALFARM_SECCOMP=0)"
    code = program(machine)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"no seccomp filter: PR_SET_NO_NEW_PRIVS failed: {os.strerror(ctypes.get_errno())}"
        nr = ARCHES[machine][1]
        libc.syscall.restype = ctypes.c_long
        if libc.syscall(ctypes.c_long(nr), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                        ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog)) != 0:
            return f"no seccomp filter: {os.strerror(ctypes.get_errno())}"
    except OSError as err:
        return f"no seccomp filter: {err}"
    return f"seccomp filter: {len(DENIED) + 2} system calls refused (ptrace, process_vm_*, perf_event_open, " \
        "bpf, io_uring, namespaces, mounts, modules), on every thread"
