"""Which part of the bubblewrap sandbox stops a CUDA worker from attaching the judge's arena?

On an H100 host, a worker inside bubblewrap failed `cudaIpcOpenMemHandle` ("mapping of buffer
object failed") while the built-in sandbox (its own PID, mount and network namespaces; the host's
IPC namespace, /dev and, at attach time, /dev/shm) attaches. This probe shares one CUDA tensor
the way the judge shares an arena (torch's `reduce_tensor`) and rebuilds it in a child run under
the worker's bubblewrap command line, then under variants with one difference each, and prints
which attach. Run on the GPU host, bwrap on PATH (carry .bin/bwrap where the host has none):

    python3 benchmarks/probes/gpu_bwrap_ipc_probe.py [--out probe.json]

Exit code 0 when it ran (whatever the variants gave), 2 when there is no CUDA device or no bwrap.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import subprocess
import sys
import tempfile

CHILD = """
import pickle, sys, torch
rebuild, args = pickle.load(open(sys.argv[1], "rb"))
try:
    t = rebuild(*args)
    print("attached", float(t.sum()))
except Exception as err:
    print("failed", type(err).__name__, str(err).splitlines()[0])
"""
# After the attach: cover /dev/shm as the worker does, and check the tensor still reads right.
COVER = """
from evalfarm.sandbox import confine
confine.cover_host_shm(64 << 20)
import os
assert os.listdir("/dev/shm") == []
print("attached", float(t.sum()))
"""


def _drop(args: list[str], flag: str) -> list[str]:
    return [a for a in args if a != flag]


def _replace_pair(args: list[str], old: tuple[str, str], new: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(args):
        if tuple(args[i:i + 2]) == old:
            out += new
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


def variants(base: list[str]) -> dict[str, list[str]]:
    """The worker's command line and variants of it, one difference each (argv before "--")."""
    cut = base.index("--")
    head, tail = base[:cut], base[cut:]
    shm = ["--bind", "/dev/shm", "/dev/shm"]
    return {
        "worker view (as the judge runs it)": head + tail,
        "host IPC namespace (no --unshare-ipc)": _drop(head, "--unshare-ipc") + tail,
        "host UTS and cgroup namespaces": _drop(_drop(head, "--unshare-uts"), "--unshare-cgroup-try") + tail,
        "host /dev (--dev-bind /dev /dev)": _replace_pair(head, ("--dev", "/dev"), ["--dev-bind", "/dev", "/dev"]) + tail,
        "host /dev/shm bound over the private one": head + shm + tail,
        "host PID namespace (no --unshare-pid)": _drop(head, "--unshare-pid") + tail,
        "host IPC namespace and host /dev/shm": _drop(head, "--unshare-ipc") + shm + tail,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    import torch

    from evalfarm.sandbox import bubblewrap, confine

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to probe")
        return 2
    os.environ[bubblewrap.MODE_ENV] = "bubblewrap"
    try:
        bwrap, _ = bubblewrap.selected(gpu=True)
    except bubblewrap.SandboxUnavailable as err:
        print(err)
        return 2
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    from torch.multiprocessing.reductions import reduce_tensor

    shared = tempfile.mkdtemp(prefix="evalfarm-ipc-probe-")
    os.chmod(shared, 0o755)
    handle = os.path.join(shared, "handle.pkl")
    with open(handle, "wb") as f:
        pickle.dump(reduce_tensor(x), f)
    own = tempfile.mkdtemp(prefix="evalfarm-ipc-own-")
    view = bubblewrap.WorkerView(own_dir=own, scratch_bytes=64 << 20, readable=(*confine.needed_paths(), shared),
                                 devices=bubblewrap.gpu_device_nodes())  # as a worker: may switch uid
    base = bubblewrap.command(bwrap, view, [sys.executable, "-c", CHILD, handle])
    cases = variants(base)
    if bubblewrap.gpu_shm_handover():  # what the judge now runs for a root CUDA worker
        handover = dataclasses.replace(view, host_shm_until_attach=True)
        cases["hand-over view (host /dev/shm until attached, then covered)"] = bubblewrap.command(
            bwrap, handover, [sys.executable, "-c", CHILD + COVER, handle])
    expected = float(x.sum())
    results = {}
    for name, cmd in cases.items():
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                                  env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
            line = (proc.stdout.strip().splitlines() or [f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"])[-1]
        except subprocess.TimeoutExpired:
            line = "timed out"
        ok = line.startswith("attached") and abs(float(line.split()[1]) - expected) < 1e-3 * abs(expected)
        results[name] = {"attached": ok, "said": line}
        print(f"{'ATTACHED' if ok else 'failed  '}  {name}: {line}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
