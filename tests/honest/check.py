"""Checking one honest kernel outside the farm: correctness on fresh inputs and a paired timing.

    python tests/honest/check.py [--device cpu|cuda] [--inputs 20] [FILE ...]

With no files, every kernel in tests/honest/kernels/ that runs on the device is checked.
The task is instantiated with the size profile the farm would use ("small" on CPU), the
reference and the candidate are built under the same seed, and both are called on the same
fresh inputs; outputs are compared with the farm's strict policy. Timing is the median of
interleaved calls (reference and candidate alternate, so drift hits both alike).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import sys
import time
from pathlib import Path

KERNELS = Path(__file__).parent / "kernels"
HEADER_KEYS = ("task", "style", "device", "expect", "speedup", "why")
_HEADER_RE = re.compile(r"^#\s*(\w+):\s*(.*?)\s*$")


@dataclasses.dataclass(frozen=True)
class Header:
    path: Path
    task: str
    styles: tuple[str, ...]
    device: str  # "cpu" | "cuda" | "any"
    expect: str
    speedup: str  # ">=1.5", "~1.0" or ">=0.5"
    why: str

    @property
    def name(self) -> str:
        return self.path.stem

    def runs_on(self, device: str) -> bool:
        return self.device == "any" or device.startswith(self.device)

    def claim_met(self, speedup: float | None) -> bool:
        return claim_met(self.speedup, speedup)


def parse_header(path: Path) -> Header:
    """The ``# key: value`` lines at the top of a kernel file (missing keys raise ValueError)."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines()[:12]:
        m = _HEADER_RE.match(line)
        if m and m.group(1) in HEADER_KEYS:
            values[m.group(1)] = m.group(2)
    missing = [k for k in HEADER_KEYS if not values.get(k)]
    if missing:
        raise ValueError(f"{path.name}: header lacks {', '.join(missing)}")
    styles = tuple(s.strip() for s in values["style"].split(",") if s.strip())
    return Header(path, values["task"], styles, values["device"], values["expect"],
                  values["speedup"], values["why"])


def claim_met(claim: str, speedup: float | None) -> bool:
    """``>=X``: at least X; ``~1.0``: within 0.8..1.25."""
    if speedup is None:
        return False
    claim = claim.strip()
    if claim.startswith(">="):
        return speedup >= float(claim[2:])
    if claim.startswith("~"):
        centre = float(claim[1:])
        return 0.8 * centre <= speedup <= 1.25 * centre
    raise ValueError(f"unknown speedup claim {claim!r}")


def all_headers() -> list[Header]:
    return [parse_header(p) for p in sorted(KERNELS.glob("*.py"))]


@dataclasses.dataclass
class CheckResult:
    header: Header
    ok: bool
    detail: str
    ref_us: float = 0.0
    cand_us: float = 0.0

    @property
    def speedup(self) -> float | None:
        return self.ref_us / self.cand_us if self.ok and self.cand_us > 0 else None


def _inputs(task_mod, device):
    import torch

    return [a.to(device) if isinstance(a, torch.Tensor) else a for a in task_mod.get_inputs()]


def check(path: Path, device: str = "cpu", n_inputs: int = 20, timed: int = 41, seed: int = 1234) -> CheckResult:
    """Correctness on ``n_inputs`` fresh inputs, then a median-of-interleaved-calls timing."""
    import torch

    from evalfarm.compare import compare_outputs
    from evalfarm.tasks.format import exec_module, instantiate_task
    from evalfarm.tasks.suite import resolve_task

    header = parse_header(path)
    task = resolve_task(header.task)
    profile = task.resolve_profile("auto", device)
    task_mod = instantiate_task(task, profile)
    torch.set_grad_enabled(False)
    init = task_mod.get_init_inputs()
    torch.manual_seed(seed)
    ref = task_mod.Model(*init).to(device)
    cand_mod = exec_module(path.read_text(), f"honest_{path.stem}", str(path))
    torch.manual_seed(seed)
    cand = cand_mod.ModelNew(*init).to(device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    torch.manual_seed(seed + 1)
    for i in range(n_inputs):
        args = _inputs(task_mod, device)
        expected = ref(*args)
        got = cand(*args)
        c = compare_outputs(got, expected, "strict")
        if not c.ok:
            return CheckResult(header, False, f"input {i}: {c.reason}")

    args = _inputs(task_mod, device)
    for _ in range(3):
        ref(*args)
        cand(*args)
    t_ref, t_cand = [], []
    for _ in range(timed):
        for fn, acc in ((ref, t_ref), (cand, t_cand)):
            sync()
            t0 = time.perf_counter()
            fn(*args)
            sync()
            acc.append(time.perf_counter() - t0)
    return CheckResult(header, True, "", statistics.median(t_ref) * 1e6, statistics.median(t_cand) * 1e6)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--inputs", type=int, default=20)
    args = ap.parse_args(argv)
    files = args.files or [h.path for h in all_headers() if h.runs_on(args.device)]
    bad = 0
    for f in files:
        try:
            r = check(f, args.device, args.inputs)
        except Exception as err:  # noqa: BLE001 - report and go on
            print(f"{f.stem:44s} ERROR {type(err).__name__}: {err}", flush=True)
            bad += 1
            continue
        if not r.ok:
            print(f"{f.stem:44s} WRONG {r.detail}", flush=True)
            bad += 1
            continue
        met = r.header.claim_met(r.speedup)
        bad += not met
        print(f"{f.stem:44s} ref {r.ref_us:9.1f} us  cand {r.cand_us:9.1f} us  speedup {r.speedup:6.2f}  "
              f"claim {r.header.speedup:6s} {'met' if met else 'NOT MET'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
