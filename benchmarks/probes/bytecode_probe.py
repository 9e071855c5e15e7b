"""Does this host's Python library carry bytecode, and what does a judge's start-up pay without it?

Prints, for a few packages a judge imports, how many of their modules have current bytecode
beside their sources; what evalfarm.judge.bytecode decides for judges here; then the seconds of
a judge-like start (``import torch`` and the memory plan's shape-only pass, ``warm_meta``) in a
fresh interpreter four ways: as judges start without the cache (no bytecode written, the
library's own read where it has any), as they would on a host whose library has none (every
module compiled from source: an empty, unwritten prefix), filling a fresh cache, and reading it.

    python benchmarks/probes/bytecode_probe.py [--device cuda] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evalfarm.judge import bytecode

START = "import torch\nfrom evalfarm.judge.memory_plan import warm_meta\nwarm_meta()\n"


def package_counts(name: str) -> tuple[int, int] | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    sources = [str(p) for p in root.rglob("*.py")]
    return sum(bytecode.has_current_bytecode(s) for s in sources), len(sources)


def timed_start(env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", START], env=env, check=True, timeout=600)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}  PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE')!r}  "
          f"sys.flags.dont_write_bytecode={sys.flags.dont_write_bytecode}")
    for name in ("torch", "sympy", "numpy"):
        counts = package_counts(name)
        if counts is not None:
            print(f"{name}: {counts[0]} of {counts[1]} modules have current bytecode beside their source")
    print(f"library lacks bytecode (judges' probe modules {', '.join(bytecode.PROBE_MODULES)}): "
          f"{bytecode.library_lacks_bytecode()}")
    print(f"candidates cannot write a cache here ({args.device}): {bytecode.candidates_cannot_write(args.device)}")
    print(f"judges' cache with {bytecode.SWITCH_ENV}={bytecode.setting()}: {bytecode.judge_cache(args.device) or 'none'}")
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as empty:
        rows: dict[str, list[float]] = {"no cache (as judges without it)": [],
                                        "no bytecode anywhere (a library without it)": [], "cache, reading": []}
        fill = timed_start({**base, "PYTHONPYCACHEPREFIX": cache})
        for _ in range(args.repeats):
            rows["no cache (as judges without it)"].append(timed_start({**base, "PYTHONDONTWRITEBYTECODE": "1"}))
            rows["no bytecode anywhere (a library without it)"].append(
                timed_start({**base, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": empty}))
            rows["cache, reading"].append(timed_start({**base, "PYTHONPYCACHEPREFIX": cache}))
        print("\n| judge-like start (import torch, warm_meta) | seconds, median | each |\n|---|---:|---|")
        print(f"| cache, filling it (once) | {fill:.2f} | |")
        for label, values in rows.items():
            print(f"| {label} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")


if __name__ == "__main__":
    main()
