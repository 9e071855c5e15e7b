"""Calibrating the precision gate (evalfarm.judge.precision): error ratios of honest variants and of
reduced-precision ones against a float64 ground truth, outside the farm.

    python benchmarks/precision_calibration.py [--device cpu|cuda] [--rounds 4] [--sizes 256,1024]
                                            [--corpus] [--json out.json]

For a matmul (KernelBench's uniform [0, 1) inputs, and widened: random signs) at each size, and
for a few reductions, it prints each variant's RMS relative L2 error over ``--rounds`` draws, the
reference's, their ratio, and the gate's verdict (k, floor as in the module). ``--corpus`` adds
every kernel of tests/honest/kernels/ that runs on the device (its task's own inputs, and widened
inputs where the widening rule applies), so the honest corpus's margin is measured too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalfarm.judge import precision  # noqa: E402


def tf32_round(x: torch.Tensor) -> torch.Tensor:
    """Round float32 to 10 explicit mantissa bits (TF32), nearest-even, as a float32 tensor."""
    bits = x.contiguous().view(torch.int32)
    lsb = (bits >> 13) & 1
    bits = (bits + 0xFFF + lsb) & ~0x1FFF
    return bits.view(torch.float32)


def matmul_variants(device: str) -> dict[str, object]:
    def split_k(chunks):
        def f(a, b):
            k = a.shape[1]
            step = math.ceil(k / chunks)
            out = None
            for s in range(0, k, step):
                part = a[:, s:s + step] @ b[s:s + step]
                out = part if out is None else out + part
            return out
        return f

    def sequential(a, b):  # one output at a time, products added in order: a naive kernel's loop
        out = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
        for k in range(a.shape[1]):
            out += a[:, k:k + 1] * b[k:k + 1, :]
        return out

    def fma_free_rows(a, b):
        return (a.unsqueeze(2) * b.unsqueeze(0)).sum(dim=1)

    v = {
        "identical": lambda a, b: torch.matmul(a, b),
        "transposed": lambda a, b: (b.t() @ a.t()).t(),
        "reversed_k": lambda a, b: a.flip(1) @ b.flip(0),
        "split_k_4": split_k(4),
        "split_k_16": split_k(16),
        "sequential_k": sequential,
        "broadcast_sum": fma_free_rows,
        "fp64_accumulate": lambda a, b: (a.double() @ b.double()).float(),
        "tf32_emulated": lambda a, b: tf32_round(a) @ tf32_round(b),
        "bf16": lambda a, b: (a.bfloat16() @ b.bfloat16()).float(),
        "fp16": lambda a, b: (a.half() @ b.half()).float(),
    }
    if device.startswith("cuda"):
        def tf32(a, b):
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                return a @ b
            finally:
                torch.backends.cuda.matmul.allow_tf32 = False
        v["tf32_real"] = tf32
    return v


def measure(ref_fn, variants, draw, rounds, out_dtype):
    """{variant: (ref_rms, cand_rms, ratio, ok)} over ``rounds`` draws."""
    errs = {name: [] for name in variants}
    for r in range(rounds):
        inputs = draw(r)
        truth = ref_fn(*precision.to_float64(inputs))
        ref = ref_fn(*inputs)
        t = precision.Truth(truth.reshape(-1).cpu().double(), None)
        for name, fn in variants.items():
            out = fn(*inputs)
            errs[name].append(precision.relative_errors(t, ref, out.to(ref.dtype)))
    res = {}
    for name, e in errs.items():
        e = [x for x in e if x is not None]
        s = precision.Summary(0, out_dtype, 10**6, precision.TASK, len(e), precision.rms([x[0] for x in e]),
                              precision.rms([x[1] for x in e]))
        res[name] = s
    return res


def show_row(name, s):
    u = precision.unit_roundoff(s.dtype)
    r = f"{s.ratio:.3g}" if s.ratio is not None else "inf"
    print(f"  {name:<24}{s.ref_error:>11.3g}{s.cand_error:>11.3g}{r:>9}{s.cand_error / u:>9.1f}  "
          f"{'pass' if s.ok else 'FAIL'}", flush=True)


def show(title, res):
    print(f"\n{title}")
    print(f"  {'variant':<24}{'ref err':>11}{'cand err':>11}{'ratio':>9}{'/ulp':>9}  gate")
    for name, s in res.items():
        show_row(name, s)


def strict_float32() -> None:
    """Full float32 matmuls and convolutions for what runs next, whatever ran before in this process."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def corpus(device: str, rounds: int, only: str = ""):
    from evalfarm.tasks.format import exec_module, instantiate_task
    from evalfarm.tasks.suite import resolve_task
    from tests.honest.check import all_headers

    results = {}
    import re

    kernels = [h for h in all_headers() if h.runs_on(device) and not (only and not re.search(only, h.name))]
    print(f"\nhonest corpus on {device}: {len(kernels)} kernels (each row printed as it is measured)", flush=True)
    for n, h in enumerate(kernels, 1):
        started = time.monotonic()
        strict_float32()  # a kernel that turned TF32 on (as one does) must not reach the next one's reference
        task = resolve_task(h.task)
        mod = instantiate_task(task, task.resolve_profile("auto", device))
        init = mod.get_init_inputs()
        torch.manual_seed(1)
        ref = mod.Model(*init).to(device)
        try:
            cand_mod = exec_module(h.path.read_text(), f"honest_{h.name}", str(h.path))
            torch.manual_seed(1)
            cand = cand_mod.ModelNew(*init).to(device)
        except Exception as err:  # noqa: BLE001
            print(f"  {h.name}: skipped ({type(err).__name__}: {str(err)[:100]})")
            continue
        ref64 = mod.Model(*init)
        ref64.load_state_dict(ref.state_dict())
        ref64 = ref64.to(device, torch.float64)
        torch.manual_seed(2)
        sample = [v.to(device) if isinstance(v, torch.Tensor) else v for v in mod.get_inputs()]
        spec, _ = precision.widening_spec(sample)
        for widened in (False, True):
            if widened and not spec:
                continue
            errs = []
            for r in range(rounds):
                torch.manual_seed(100 + r)
                inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in mod.get_inputs()]
                if widened:
                    inputs = precision.widen(inputs, spec, 1000 + r)
                with torch.no_grad():
                    truth = precision.float64_call(ref64, precision.to_float64(inputs))
                    r_out = ref(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
                    c_out = cand(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
                r_out = list(r_out) if isinstance(r_out, tuple | list) else [r_out]
                c_out = list(c_out) if isinstance(c_out, tuple | list) else [c_out]
                for i, (g, ro, co) in enumerate(zip(truth, r_out, c_out, strict=True)):
                    if precision.gated_dtype(ro.dtype):
                        e = precision.relative_errors(precision.Truth(g.reshape(-1).cpu().double(), None), ro, co)
                        if e is not None:
                            errs.append((i, ro.dtype, ro.numel(), e))
            for i in sorted({x[0] for x in errs}):
                mine = [x for x in errs if x[0] == i]
                s = precision.Summary(i, mine[0][1], mine[0][2], precision.WIDENED if widened else precision.TASK,
                                      len(mine), precision.rms([x[3][0] for x in mine]),
                                      precision.rms([x[3][1] for x in mine]))
                results[f"{h.name}[{i}]{'/widened' if widened else ''}"] = s
                show_row(f"{h.name}[{i}]{'/widened' if widened else ''}", s)
        print(f"  ({n}/{len(kernels)} {h.name}: {time.monotonic() - started:.1f} s)", flush=True)
    show(f"honest corpus on {device}", results)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--sizes", default="64,256,1024")
    ap.add_argument("--corpus", action="store_true")
    ap.add_argument("--only", default="", help="with --corpus: only kernels whose name matches this regex")
    ap.add_argument("--no-matmul", action="store_true", help="skip the matmul and reduction tables")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    strict_float32()
    dev = args.device
    out = {}
    for n in ([] if args.no_matmul else [int(s) for s in args.sizes.split(",")]):
        variants = matmul_variants(dev)
        if n > 512:
            variants.pop("sequential_k")
            variants.pop("broadcast_sum")
        for widened in (False, True):
            def draw(r, n=n, widened=widened):
                g = torch.Generator(device=dev).manual_seed(r)
                a = torch.rand(n, n, generator=g, device=dev)
                b = torch.rand(n, n, generator=g, device=dev)
                if widened:
                    spec, _ = precision.widening_spec([a, b])
                    a, b = precision.widen([a, b], spec, 77 + r)
                return [a, b]
            res = measure(lambda a, b: a @ b, variants, draw, args.rounds, torch.float32)
            title = f"matmul {n}x{n}x{n} float32, {'widened (random signs)' if widened else 'uniform [0, 1)'} on {dev}"
            show(title, res)
            out[title] = {k: s.to_dict() for k, s in res.items()}
    # Reductions to a single number and per row.
    for n in (() if args.no_matmul else (4096, 1 << 20)):
        def draw(r, n=n):
            g = torch.Generator(device=dev).manual_seed(r)
            return [torch.rand(n, generator=g, device=dev)]
        variants = {
            "identical": lambda x: x.mean(),
            "sum_then_divide": lambda x: x.sum() / x.numel(),
            "chunked_256": lambda x: x.view(-1, 256).sum(1).sum() / x.numel(),
            "sequential_cumsum": lambda x: x.cumsum(0)[-1] / x.numel(),
            "bf16": lambda x: x.bfloat16().mean().float(),
        }
        res = measure(lambda x: x.mean(), variants, draw, args.rounds, torch.float32)
        for s in res.values():
            s.numel = 1
        title = f"mean of {n} uniform [0, 1) float32 on {dev}"
        show(title, res)
        out[title] = {k: s.to_dict() for k, s in res.items()}
    if args.corpus:
        out["corpus"] = {k: s.to_dict() for k, s in corpus(dev, args.rounds, args.only).items()}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
