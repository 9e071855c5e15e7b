"""Does a CPU evaluation's thread pool start under the worker's address-space limit on this host?

    python benchmarks/probes/address_space_probe.py [--threads N] [--limit-gib 16]

Prints what `import torch` maps here, then, each in a fresh process that imports torch first (as
a worker does): a fixed RLIMIT_AS of --limit-gib (the old rule) and the same budget counted
beyond the start-up mapping (evalfarm.sandbox.address_space_limit), each followed by
torch.set_num_threads(N) and a matmul that starts the OpenMP pool. One line per case.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import resource, sys, time
import torch
from evalfarm.sandbox import address_space_limit, mapped_bytes
mode, threads, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
base = mapped_bytes()
limit = budget if mode == "fixed" else address_space_limit(budget)[0]
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
torch.set_num_threads(threads)
t0 = time.perf_counter()
a = torch.randn(2048, 2048)
(a @ a).sum().item()
print(f"mapped at start {base >> 20} MiB, limit {limit >> 20} MiB, {threads} threads: matmul ok in "
      f"{time.perf_counter() - t0:.3f} s", flush=True)
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--limit-gib", type=int, default=16)
    args = p.parse_args()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    env.pop("OMP_NUM_THREADS", None)
    failed = 0
    for mode in ("fixed", "relative"):
        out = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.threads), str(args.limit_gib << 30)],
                             capture_output=True, text=True, env=env, timeout=300)
        text = (out.stdout.strip() or out.stderr.strip().splitlines()[-1:] or ["(no output)"])
        line = text if isinstance(text, str) else text[0]
        print(f"{mode:8s} exit {out.returncode}: {line}")
        if out.returncode != 0:
            print("          " + " | ".join(out.stderr.strip().splitlines()[-3:]))
            failed += mode == "relative"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
