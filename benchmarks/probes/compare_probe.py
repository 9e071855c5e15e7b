"""What one output comparison (evalfarm.compare) costs at a task's output size, next to the
passes it is made of, on one device: where a round's `rounds_audit` goes.

    python benchmarks/probes/compare_probe.py --device cuda --numel 4194304,16777216,33554432 --repeats 30
    git show REV:evalfarm/compare.py > /tmp/compare_before.py
    python benchmarks/probes/compare_probe.py --device cuda --baseline /tmp/compare_before.py
    python benchmarks/probes/compare_probe.py --device cuda --norm-rows 256,1024 --numel 1048576,16777216

Prints one line per size and case: the median milliseconds of `repeats` calls (synchronised) of
this checkout's comparison and, with ``--baseline FILE`` (another version of evalfarm/compare.py),
of that one, measured in turn in the same run: `compare_tensor` for a bit-identical pair and for a
pair within tolerance (float32 noise of 1e-6 relative), the audits' one look (`queued_check` then
`passed`, outputs up to compare.CHUNK_ELEMENTS) for the pair within tolerance; and, as floors,
torch.equal alone and one fused read of both tensors ((out - ref).abs().max()). Each line also says
whether both versions returned the same Comparison (or the same verdict, and how far apart their
relative L2 errors are).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
import types
from collections.abc import Callable

import torch

from evalfarm import compare


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


def _load(path: str, name: str = "compare_baseline") -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _with_norm_row(row: int) -> types.ModuleType:
    """This checkout's compare module, loaded again, with NORM_ROW set to ``row``."""
    module = _load(compare.__file__, f"compare_rows_{row}")
    module.NORM_ROW = row
    return module


def _look(mod: types.ModuleType, out: torch.Tensor, ref: torch.Tensor) -> object:
    q = mod.queued_check(out, ref)
    return None if q is None else mod.passed(q.cpu().tolist(), ref)


def _agreement(dicts: list[dict | None]) -> str:
    """'yes' when every version returned the same Comparison, else how they differ."""
    if all(d == dicts[0] for d in dicts):
        return "yes"
    if any(d is None for d in dicts) or len({d["ok"] for d in dicts}) > 1:  # type: ignore[index]
        return f"NO: {dicts}"
    rel = [d["rel_l2_error"] for d in dicts]  # type: ignore[index]
    others = {k for d in dicts for k, v in d.items() if k != "rel_l2_error" and v != dicts[0][k]}  # type: ignore[union-attr,index]
    spread = (max(rel) - min(rel)) / max(abs(max(rel)), 1e-300)
    return f"same verdict; rel_l2_error {spread:.1e} apart" + (f"; also differ: {sorted(others)}" if others else "")


def _one_size(numel: int, versions: dict[str, types.ModuleType], device: torch.device, repeats: int) -> None:
    g = torch.Generator(device=device).manual_seed(numel)
    ref = torch.randn(numel, device=device, generator=g)
    same = ref.clone()
    close = ref * (1 + 1e-6 * torch.randn(numel, device=device, generator=g))
    cases: dict[str, Callable[[types.ModuleType], object]] = {
        "compare_tensor, identical": lambda m: m.compare_tensor(same, ref),
        "compare_tensor, within tolerance": lambda m: m.compare_tensor(close, ref),
    }
    if numel <= compare.CHUNK_ELEMENTS:
        cases["the audits' look, within tolerance"] = lambda m: _look(m, close, ref)
    for label, case in cases.items():
        times = [_median_ms(lambda m=m, case=case: case(m), device, repeats) for m in versions.values()]
        dicts = [None if r is None else r.to_dict() for r in (case(m) for m in versions.values())]  # type: ignore[attr-defined]
        print(f"| {numel} | {label} | " + " | ".join(f"{t:.3f}" for t in times) + f" | {_agreement(dicts)} |")
    floors = {"torch.equal alone": lambda: torch.equal(close, ref),
              "one read of both, (out - ref).abs().max()": lambda: float((close - ref).abs().max()),
              "vector_norm(ref), float32": lambda: float(torch.linalg.vector_norm(ref)),
              "vector_norm(ref, dtype=float64)": lambda: float(torch.linalg.vector_norm(ref, dtype=torch.float64)),
              "this version's norm of ref (_rows_norm)": lambda: float(compare._rows_norm(ref))}
    for label, fn in floors.items():
        print(f"| {numel} | {label} | {_median_ms(fn, device, repeats):.3f} |" + " |" * len(versions))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--numel", default=str(4096 * 8192),
                    help="output elements, comma-separated (default: L1/1's default size)")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--baseline", default=None, help="another version of evalfarm/compare.py to time beside this one")
    ap.add_argument("--norm-rows", default="", help="also time this version with these row lengths of its norms "
                    "(compare.NORM_ROW), comma-separated")
    args = ap.parse_args()
    device = torch.device(args.device)
    versions: dict[str, types.ModuleType] = {"this": compare}
    for row in (int(v) for v in args.norm_rows.split(",") if v):
        versions[f"rows of {row}"] = _with_norm_row(row)
    if args.baseline:
        versions["baseline"] = _load(args.baseline)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{name}, float32, median of {args.repeats} (ms)")
    print(f"| elements | case | {' | '.join(versions)} | same result |")
    print("|---:|---|" + "---:|" * len(versions) + "---|")
    for numel in (int(v) for v in args.numel.split(",")):
        _one_size(numel, versions, device, args.repeats)

if __name__ == "__main__":
    main()
