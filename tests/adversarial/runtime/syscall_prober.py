# ruff: noqa
# Tries, at import, the system calls a candidate has no use for: reading another process's memory
# (ptrace, process_vm_readv), performance counters, bpf, new user namespaces, mounts, keyrings.
# Also from a thread of the intra-op pool that existed before the candidate ran. Reports what each
# returned by raising (the test reads the verdict's detail).
import ctypes
import errno
import json
import os
import platform
import threading

import torch
import torch.nn as nn

NR = {"x86_64": {"ptrace": 101, "process_vm_readv": 310, "perf_event_open": 298, "bpf": 321, "unshare": 272,
                 "mount": 165, "keyctl": 250, "userfaultfd": 323, "io_uring_setup": 425},
      "aarch64": {"ptrace": 117, "process_vm_readv": 270, "perf_event_open": 241, "bpf": 280, "unshare": 97,
                  "mount": 40, "keyctl": 219, "userfaultfd": 282, "io_uring_setup": 425}}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def attempt(name: str) -> str:
    args = {"ptrace": (16, os.getppid(), 0, 0),  # PTRACE_ATTACH to its parent
            "process_vm_readv": (1, 0, 0, 0, 0, 0),
            "perf_event_open": (0, 0, -1, -1, 0),
            "bpf": (0, 0, 0),
            "unshare": (0x10000000,),  # CLONE_NEWUSER
            "mount": (0, 0, 0, 0, 0),
            "keyctl": (0, 0),
            "userfaultfd": (0,),
            "io_uring_setup": (1, 0)}[name]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args])
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


found = {name: attempt(name) for name in NR}
box = []
t = threading.Thread(target=lambda: box.append(attempt("ptrace")))
t.start()
t.join()
found["ptrace_from_a_new_thread"] = box[0]
raise RuntimeError("SYSCALLS " + json.dumps(found) + " END")


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()

    def forward(self, x):
        return x
