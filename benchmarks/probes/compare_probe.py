"""What one output comparison (evalfarm.compare.compare_tensor) costs at a task's output size,
next to the passes it is made of, on one device: where a round's `rounds_audit` goes.

    python benchmarks/probes/compare_probe.py --device cuda --numel 33554432 --repeats 30

Prints one line per case: the median milliseconds of `repeats` calls (synchronised), for a
bit-identical pair, a pair within tolerance (float32 noise of 1e-6 relative), the same without
the elementwise shortcut (compare.ELEMENTWISE_SHORTCUT), and, as floors,
torch.equal alone and one fused read of both tensors ((out - ref).abs().max()).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from evalfarm import compare
from evalfarm.compare import compare_tensor


def _median_ms(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn()
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--numel", type=int, default=4096 * 8192, help="output elements (L1/1's default size)")
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    device = torch.device(args.device)
    ref = torch.randn(args.numel, device=device)
    same = ref.clone()
    close = ref * (1 + 1e-6 * torch.randn_like(ref))
    def full_pass() -> object:
        compare.ELEMENTWISE_SHORTCUT = False
        try:
            return compare_tensor(close, ref)
        finally:
            compare.ELEMENTWISE_SHORTCUT = True

    cases = {
        "compare_tensor, identical": lambda: compare_tensor(same, ref),
        "compare_tensor, within tolerance": lambda: compare_tensor(close, ref),
        "the same, elementwise pass not skipped": full_pass,
        "torch.equal alone": lambda: torch.equal(close, ref),
        "one read of both, (out - ref).abs().max()": lambda: float((close - ref).abs().max()),
    }
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{name}, {args.numel} float32 elements ({args.numel * 4 / 2**20:.0f} MiB per tensor), "
          f"median of {args.repeats}")
    for label, fn in cases.items():
        print(f"  {label:45s} {_median_ms(fn, device, args.repeats):8.3f} ms")


if __name__ == "__main__":
    main()
