"""Which rollout pays: a static batch, or continuous batching (learner.lm.engine)?

    python -m learner.bench.rollout --suite tiny              # CPU: the same code paths, tiny model
    python -m learner.bench.rollout --suite 1.5b --out r.json # GPU host: random Qwen2.5-1.5B shape

One RL step's rollouts: `prompts` distinct prompts x G samples, decoded by `rows` rows at a time
(the learner's `sampling.batch_size`), each completion capped at a length drawn once per sample
from the suite's distribution, a stand-in for where its EOS falls (random weights never emit
one). The static sampler takes the samples `rows` at a time in order, G equal prompts sharing a
prefill, and each batch decodes until its longest row ends; the continuous engine refills a row
as soon as its completion ends. Both run the same samples, caps and weights twice (the first
compiles); reported: seconds, useful tokens/s, and row efficiency (useful tokens over rows x
decode steps: 1.0 when no row ever decodes for a finished completion).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from learner.bench.args import add_steps_per_check
from learner.lm.engine import ContinuousSampler, expected_static_efficiency
from learner.lm.model import Transformer
from learner.lm.sampler import Sampler, SamplingConfig
from learner.lm.sharding import MeshConfig, create_sharded_model, make_mesh

log = logging.getLogger(__name__)

SUITES: dict[str, dict[str, Any]] = {
    # 32 prompts x G=8 = 256 samples on 64 rows; prompt 2048, up to 2048 new tokens.
    "1.5b": dict(model="qwen2.5-1.5b", prompts=32, group=8, prompt_len=2048, max_new=2048, rows=64,
                 chunk=64, min_frac=0.1),
    "tiny": dict(model="tiny", prompts=8, group=4, prompt_len=16, max_new=48, rows=8, chunk=8, min_frac=0.1),
}


def draw_caps(n: int, max_new: int, min_frac: float, seed: int = 0) -> list[int]:
    """Completion lengths uniform in [min_frac, 1] x max_new (at least 1)."""
    rng = np.random.default_rng(seed)
    return [max(1, int(x)) for x in rng.uniform(min_frac * max_new, max_new, n)]


def _timed(fn: Any) -> tuple[Any, float]:
    fn()  # compiles every shape it needs
    t0 = time.perf_counter()
    out = fn()
    jax.block_until_ready(out.tokens)
    return out, time.perf_counter() - t0


def bench_rollout(suite: str, seed: int = 0, steps_per_check: int = 1) -> dict[str, Any]:
    from learner.bench.throughput import _suite_model

    s = SUITES[suite]
    cfg = _suite_model(s["model"])
    mesh = make_mesh(MeshConfig(data=1, fsdp=-1, tensor=1))
    model = create_sharded_model(lambda: Transformer(cfg, rngs=nnx.Rngs(seed)), mesh)
    rng = np.random.default_rng(seed)
    distinct = rng.integers(1, cfg.vocab_size, (s["prompts"], s["prompt_len"])).astype(np.int32)
    rows = [list(r) for r in np.repeat(distinct, s["group"], axis=0)]
    caps = draw_caps(len(rows), s["max_new"], s["min_frac"], seed)
    sc = SamplingConfig(max_new_tokens=s["max_new"], temperature=1.0, eos_ids=(-1,))
    key = jax.random.PRNGKey(seed)
    b, g = s["rows"], s["group"]
    static = Sampler(model, mesh=mesh, min_bucket=64, steps_per_check=steps_per_check)

    def run_static() -> Any:
        outs = [static.generate(rows[i:i + b], sc, jax.random.fold_in(key, i), group=g if b % g == 0 else 1,
                                limits=caps[i:i + b]) for i in range(0, len(rows), b)]
        return _Concat(outs)

    engine = ContinuousSampler(model, rows=b, chunk=s["chunk"], mesh=mesh, min_bucket=64,
                               steps_per_check=steps_per_check)
    res_s, t_static = _timed(run_static)
    res_c, t_cont = _timed(lambda: engine.generate(rows, sc, key, limits=caps))
    useful = int(sum(caps))
    assert int(res_s.lengths.sum()) == useful == int(res_c.lengths.sum()), "both must produce every capped token"
    return dict(
        suite=suite, device=str(jax.devices()[0].device_kind), samples=len(rows), **s,
        tokens=useful, static=dict(seconds=t_static, tokens_per_s=useful / t_static,
                                   row_efficiency=expected_static_efficiency(caps, b)),
        continuous=dict(seconds=t_cont, tokens_per_s=useful / t_cont, row_efficiency=engine.stats.row_efficiency,
                        steps=engine.stats.steps, chunks=engine.stats.chunks, refills=engine.stats.refills,
                        prefilled=engine.stats.prefilled),
        speedup=t_static / t_cont, fused_prefill=bool(static.fused_prefill), steps_per_check=steps_per_check,
    )


class _Concat:
    """The static batches' results as one (lengths and tokens in sample order)."""

    def __init__(self, parts: list[Any]) -> None:
        self.tokens = np.concatenate([p.tokens for p in parts])
        self.lengths = np.concatenate([p.lengths for p in parts])


def table(r: dict[str, Any]) -> str:
    st, ct = r["static"], r["continuous"]
    return "\n".join([
        f"{r['model']} on {r['device']}: {r['samples']} samples ({r['prompts']} prompts x G={r['group']}), "
        f"{r['rows']} rows, prompts of {r['prompt_len']} tokens, completions capped uniformly in "
        f"[{r['min_frac']:.0%}, 100%] of {r['max_new']} tokens ({r['tokens']} in all)", "",
        "| rollout | seconds | useful tokens/s | row efficiency |", "|---|---|---|---|",
        f"| static batches | {st['seconds']:.2f} | {st['tokens_per_s']:.0f} | {st['row_efficiency']:.0%} |",
        f"| continuous batching | {ct['seconds']:.2f} | {ct['tokens_per_s']:.0f} | {ct['row_efficiency']:.0%} |",
        "", f"continuous / static speed: {r['speedup']:.2f}x ({ct['chunks']} device calls, {ct['refills']} refills, "
        f"{ct['prefilled']} prompts prefilled for {r['samples']} samples); prefill "
        f"{'fused (cuDNN with row lengths)' if r.get('fused_prefill') else 'masked attention'}; "
        f"{r.get('steps_per_check', 1)} decode step(s) per check of the loop's condition",
    ])


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    p = argparse.ArgumentParser(prog="python -m learner.bench.rollout", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--suite", choices=sorted(SUITES), default="tiny")
    p.add_argument("--seed", type=int, default=0)
    add_steps_per_check(p)
    p.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = p.parse_args(argv)
    r = bench_rollout(args.suite, args.seed, args.steps_per_check)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(r, indent=2))
    print(table(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
