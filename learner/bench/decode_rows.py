"""How the rollout's decode step costs with the rows a GPU holds, and what that allows multi-GPU.

    python -m learner.bench.decode_rows --suite tiny                  # CPU: the same code paths
    python -m learner.bench.decode_rows --suite 1.5b --out d.json     # one GPU: random Qwen2.5-1.5B

Data-parallel rollouts give each of N GPUs 1/N of the rows, so at a fixed global batch the
rollout scales only as far as the decode step's cost falls with the rows. This measures that
cost with the learner's own `Sampler` (its while loop, sampling and `steps_per_check`): for each
row count, two generates of the same compiled shape whose rows stop after `short` and after
`long` new tokens; the difference over `long - short` steps is the cost of one decode step
(prefill and launch cancel). The measured steps then predict the rollout's strong-scaling
efficiency on N GPUs, `step(R) / (N * step(R / N))`, for the scaling benchmark's R rows (what
`learner.bench.scaling` measures on N real GPUs, less its collectives); a least-squares line
`step = fixed + per_row * rows` names the part that no number of GPUs removes, and the
HBM-traffic bound of each step (weights plus the KV cache read) shows how far above it the
fixed part sits (bandwidth: a measured on-device copy). XLA flags (command buffers, say) go through XLA_FLAGS, one process each.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from learner.bench.args import add_steps_per_check

log = logging.getLogger(__name__)

SUITES: dict[str, dict[str, Any]] = {
    # The scaling benchmark's rollout (learner.bench.scaling "1.5b"): 128 rows, 2048-token prompts.
    "1.5b": dict(model="qwen2.5-1.5b", rows=(32, 64, 128), prompt_len=2048, short=64, long=320,
                 global_rows=128, copy_bytes=2 << 30),
    "tiny": dict(model="tiny", rows=(2, 4, 8), prompt_len=16, short=4, long=20, global_rows=8,
                 copy_bytes=1 << 20),
}


def fit_line(rows: list[int], step_s: list[float]) -> tuple[float, float]:
    """Least-squares `step = fixed + per_row * rows`; returns (fixed, per_row)."""
    if len(rows) < 2 or len(set(rows)) < 2:
        raise ValueError("a line needs at least two distinct row counts")
    per_row, fixed = np.polyfit(np.asarray(rows, float), np.asarray(step_s, float), 1)
    return float(fixed), float(per_row)


def strong_scaling(step_ms: dict[int, float], global_rows: int) -> dict[int, float]:
    """Rollout efficiency on N GPUs at a fixed global batch, `step(R) / (N * step(R / N))`, for every
    N whose share `R / N` was measured (`step_ms`: rows -> ms per decode step)."""
    if global_rows not in step_ms:
        raise ValueError(f"the global batch ({global_rows} rows) must be among the measured row counts")
    return {global_rows // rows: step_ms[global_rows] / (global_rows // rows * ms)
            for rows, ms in sorted(step_ms.items())
            if rows < global_rows and global_rows % rows == 0}


def bench_rows(suite: str, steps_per_check: int = 1, seed: int = 0) -> dict[str, Any]:
    from learner.bench.throughput import _suite_model, decode_bytes_per_step, measure_copy_bandwidth
    from learner.lm.model import Transformer
    from learner.lm.sampler import Sampler, SamplingConfig
    from learner.lm.sharding import MeshConfig, create_sharded_model, make_mesh

    s = SUITES[suite]
    bandwidth = measure_copy_bandwidth(s["copy_bytes"])
    cfg = _suite_model(s["model"])
    mesh = make_mesh(MeshConfig(data=1, fsdp=1, tensor=1), jax.devices()[:1])
    model = create_sharded_model(lambda: Transformer(cfg, rngs=nnx.Rngs(seed)), mesh)
    sampler = Sampler(model, mesh=mesh, min_bucket=64, steps_per_check=steps_per_check)
    weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(sampler.params))
    rng = np.random.default_rng(seed)
    sc = SamplingConfig(max_new_tokens=s["long"], temperature=1.0, eos_ids=(-1,))
    _, cache_len = sampler.shapes_for(s["prompt_len"], s["long"])
    points = []
    for rows in s["rows"]:
        prompts = [list(r) for r in rng.integers(1, cfg.vocab_size, (rows, s["prompt_len"]))]
        times = {}
        for cap in (s["short"], s["long"], s["short"], s["long"]):  # the first pass compiles and warms up
            key = jax.random.PRNGKey(cap)
            t0 = time.perf_counter()
            out = sampler.generate(prompts, sc, key, limits=[cap] * rows)
            assert int(out.lengths.sum()) == cap * rows
            times[cap] = time.perf_counter() - t0  # the second run of each cap is kept
        step = (times[s["long"]] - times[s["short"]]) / (s["long"] - s["short"])
        mid_cache = s["prompt_len"] + (s["short"] + s["long"]) // 2
        bound = decode_bytes_per_step(cfg, rows, mid_cache, weight_bytes) / bandwidth
        points.append(dict(rows=rows, step_ms=step * 1e3, tokens_per_s=rows / step, bound_ms=bound * 1e3,
                           short_s=times[s["short"]], long_s=times[s["long"]]))
        log.info("rows %d: %.3f ms per decode step (HBM bound %.3f ms)", rows, step * 1e3, bound * 1e3)
    fixed, per_row = fit_line([p["rows"] for p in points], [p["step_ms"] / 1e3 for p in points])
    predicted = strong_scaling({p["rows"]: p["step_ms"] for p in points}, s["global_rows"])
    return dict(suite=suite, model=s["model"], device=str(jax.devices()[0].device_kind),
                jax_version=jax.__version__, xla_flags=os.environ.get("XLA_FLAGS", ""),
                steps_per_check=steps_per_check, prompt_len=s["prompt_len"], cache_len=cache_len,
                short=s["short"], long=s["long"], weight_bytes=weight_bytes, copy_bandwidth=bandwidth,
                points=points, fixed_ms=fixed * 1e3, per_row_ms=per_row * 1e3,
                global_rows=s["global_rows"], predicted_efficiency={str(n): e for n, e in sorted(predicted.items())})


def table(r: dict[str, Any]) -> str:
    lines = [f"{r['model']} decode step on {r['device']}, prompts of {r['prompt_len']} tokens, cache "
             f"{r['cache_len']}, {r['steps_per_check']} step(s) per loop check, XLA_FLAGS="
             f"'{r['xla_flags']}'", "",
             "| rows | ms per step | tokens/s | HBM bound ms |", "|---|---|---|---|"]
    lines += [f"| {p['rows']} | {p['step_ms']:.3f} | {p['tokens_per_s']:.0f} | {p['bound_ms']:.3f} |"
              for p in r["points"]]
    pred = ", ".join(f"{n} GPUs {e:.0%}" for n, e in r["predicted_efficiency"].items())
    lines += ["", f"step = {r['fixed_ms']:.3f} ms + {r['per_row_ms'] * 1e3:.2f} us x rows; predicted rollout "
                  f"efficiency at {r['global_rows']} rows: {pred}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    p = argparse.ArgumentParser(prog="python -m learner.bench.decode_rows", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--suite", choices=sorted(SUITES), default="tiny")
    add_steps_per_check(p)
    p.add_argument("--out", type=Path, default=None, help="append the result as one JSON line here")
    args = p.parse_args(argv)
    r = bench_rows(args.suite, args.steps_per_check)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            f.write(json.dumps(r) + "\n")
    print(table(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
