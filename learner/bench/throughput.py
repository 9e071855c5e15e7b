"""Training-throughput / MFU and decode-throughput benchmark on a random ~1B Qwen2-shaped model.

    python -m learner.bench.throughput --out bench.json            # GPU: seq 4096, decode batch 64 / 256
    python -m learner.bench.throughput --tiny --out bench.json     # CPU smoke test
    python -m learner.bench.throughput --suite h100 --out-dir $OUT # the learner-at-scale targets, one GPU

Method (see docs/learner_model.md):
* training FLOPs/token = 6 * N_matmul + 6 * L * s * (H * D)   (attention QK^T and PV matmuls,
  12 * L * s * d per token fwd+bwd, halved for causality); MFU = FLOPs/token * tokens/s / peak.
  Rematerialisation FLOPs are NOT counted (model FLOPs utilisation).
* decode: one step reads all weights once (bf16) plus the whole K/V cache of length T:
  bytes/step = W_bytes + 2 * L * B * K * T * D * 2; bound tokens/s = B * BW / bytes/step.
  With `--suite`, BW is the card's copy bandwidth measured first (`measure_copy_bandwidth`).
* `--suite h100` (or `tiny` on CPU): a random Qwen2.5-1.5B-shaped model; an RL step at G=16,
  8 prompts of 2k tokens, 2k-token responses, micro-batched (`learner.bench.rl_step`); decode at
  batch 256, context 4k against the bound; training MFU at sequence 4096 with micro-batching.
  Writes suite.json, suite.md (the table) under --out-dir.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from learner.lm.config import ModelConfig
from learner.lm.model import Transformer, init_cache
from learner.lm.sampler import decode_loop
from learner.lm.sharding import (
    MeshConfig,
    batch_sharding,
    batch_size_multiple,
    create_sharded_model,
    make_mesh,
)
from learner.runtime.losses import lm_loss_sum_count
from learner.runtime.microbatch import micro_batch_count
from learner.runtime.train_step import (
    OptimizerConfig,
    create_train_state,
    make_optimizer,
    train_step,
)

log = logging.getLogger(__name__)

H200_PEAK_BF16_FLOPS = 989.5e12
H200_HBM_BYTES_PER_S = 4.3e12


def qwen2_1b_config(**kw: Any) -> ModelConfig:
    """Qwen2-shaped, 1.07B params (tied 151936 x 2048 embedding)."""
    base = dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_layers=16,
        num_heads=16, num_kv_heads=8, head_dim=128, model_type="qwen2", qkv_bias=True,
        tie_word_embeddings=True, rope=dataclasses.replace(
            ModelConfig.__dataclass_fields__["rope"].default_factory(), theta=1e6),
        max_position_embeddings=32768, rms_norm_eps=1e-6,
    )  # fmt: skip
    base.update(kw)
    return ModelConfig(**base)  # type: ignore[arg-type]


def tiny_config(**kw: Any) -> ModelConfig:
    base = dict(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
        num_kv_heads=2, head_dim=16, model_type="qwen2", qkv_bias=True, tie_word_embeddings=True,
    )  # fmt: skip
    base.update(kw)
    return ModelConfig(**base)  # type: ignore[arg-type]


def train_flops_per_token(cfg: ModelConfig, seq: int) -> float:
    attn = 12 * cfg.num_layers * seq * cfg.num_heads * cfg.head_dim / 2
    return 6.0 * cfg.num_matmul_params() + attn


def decode_bytes_per_step(cfg: ModelConfig, batch: int, cache_len: int, weight_bytes: int) -> int:
    kv = 2 * cfg.num_layers * batch * cfg.num_kv_heads * cache_len * cfg.head_dim * 2
    return weight_bytes + kv


def _sync(x: Any) -> None:
    jax.block_until_ready(x)


def _peak_mem_gb(devices: Sequence[jax.Device] | None = None) -> float | None:
    from learner.bench.rl_step import _peak_gb

    return _peak_gb(devices or jax.devices()[:1])


def bench_train(
    cfg: ModelConfig, *, batch: int, seq: int, steps: int, warmup: int, chunk: int | None,
    peak_flops: float, micro_batch_tokens: int = 0, devices: Sequence[jax.Device] | None = None,
    tensor: int = 1,
) -> dict[str, Any]:
    """`devices`: the mesh's devices (default: all), on the fsdp axis but for `tensor` of them;
    MFU is per device (the step's FLOPs over the devices' summed peak)."""
    mesh = make_mesh(MeshConfig(data=1, fsdp=-1, tensor=tensor), devices)
    model = create_sharded_model(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    tx = make_optimizer(OptimizerConfig(learning_rate=1e-5, weight_decay=0.1, grad_clip_norm=1.0))
    state = create_train_state(model, tx, mesh=mesh)
    del model
    rng = np.random.default_rng(0)
    data = {
        "tokens": rng.integers(0, cfg.vocab_size, (batch, seq)).astype(np.int32),
        "loss_mask": np.ones((batch, seq), np.int32),
    }
    mb = micro_batch_count(batch, seq, micro_batch_tokens, batch_size_multiple(mesh))
    data = jax.device_put(data, batch_sharding(mesh))
    loss_fn = functools.partial(lm_loss_sum_count, chunk_size=chunk)
    t0 = time.perf_counter()
    state, metrics = train_step(state, data, loss_fn, mb)
    _sync(metrics)
    compile_s = time.perf_counter() - t0
    for _ in range(max(0, warmup - 1)):
        state, metrics = train_step(state, data, loss_fn, mb)
    _sync(metrics)
    t0 = time.perf_counter()
    for _ in range(steps):
        state, metrics = train_step(state, data, loss_fn, mb)
    _sync(metrics)
    dt = (time.perf_counter() - t0) / steps
    tokens = batch * seq
    fpt = train_flops_per_token(cfg, seq)
    res = dict(
        remat=cfg.remat, remat_policy=cfg.remat_policy, attention=model_attention_impl(cfg),
        batch=batch, seq=seq, micro_batches=mb, step_time_s=dt, tokens_per_s=tokens / dt, flops_per_token=fpt,
        mfu=fpt * tokens / dt / (peak_flops * mesh.size), loss=float(metrics["loss"]), compile_s=compile_s,
        devices=mesh.size, peak_mem_gb=_peak_mem_gb(list(mesh.devices.flat)),
    )
    del state
    return res


def model_attention_impl(cfg: ModelConfig) -> str:
    from learner.lm.attention import resolve_attention_impl

    return resolve_attention_impl(cfg.attention_impl, cfg.jnp_compute_dtype, cfg.head_dim)


@functools.partial(jax.jit, static_argnames=("graphdef", "steps"), donate_argnames=("cache",))
def _decode_bench(graphdef: Any, params: Any, cache: Any, key_valid: jax.Array,
                  start: jax.Array, *, steps: int) -> tuple[jax.Array, Any, Any]:
    model = nnx.merge(graphdef, params)
    b = key_valid.shape[0]
    logits = jnp.zeros((b, model.cfg.vocab_size), jnp.float32)
    toks, lps, _, n, cache = decode_loop(
        model, logits, cache, key_valid, start, jnp.full((b,), start, jnp.int32),
        jax.random.PRNGKey(0), jnp.array([-1], jnp.int32), jnp.float32(1.0), jnp.float32(1.0),
        max_new=steps, greedy=True, use_top_p=False, pad_id=0,
    )
    return toks, lps.sum() + n, cache  # returning the cache lets the donated buffer alias it


def bench_decode(
    cfg: ModelConfig, *, batch: int, ctx: int, steps: int, bandwidth: float
) -> dict[str, Any]:
    """Steady-state decode with a full-length cache: the last `steps` slots of a `ctx` cache."""
    dcfg = cfg.replace(param_dtype="bfloat16", compute_dtype="bfloat16", remat=False)
    mesh = make_mesh(MeshConfig(data=1, fsdp=-1, tensor=1))
    model = create_sharded_model(lambda: Transformer(dcfg, rngs=nnx.Rngs(0)), mesh)
    graphdef, params = nnx.split(model)
    weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
    start = ctx - steps
    key_valid = jnp.broadcast_to(jnp.arange(ctx) < start, (batch, ctx))

    def fresh_cache() -> Any:
        return jax.jit(lambda: init_cache(dcfg, batch, ctx))()

    t0 = time.perf_counter()
    out = _decode_bench(graphdef, params, fresh_cache(), key_valid, jnp.int32(start), steps=steps)
    _sync(out)
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(3):
        cache = fresh_cache()
        _sync(cache)
        t0 = time.perf_counter()
        out = _decode_bench(graphdef, params, cache, key_valid, jnp.int32(start), steps=steps)
        _sync(out)
        times.append(time.perf_counter() - t0)
    dt = min(times) / steps
    nbytes = decode_bytes_per_step(dcfg, batch, ctx, weight_bytes)
    bound_step = nbytes / bandwidth
    return dict(
        batch=batch, ctx=ctx, steps=steps, step_time_s=dt, tokens_per_s=batch / dt,
        bytes_per_step=nbytes, weight_bytes=weight_bytes, bound_step_time_s=bound_step,
        bound_tokens_per_s=batch / bound_step, frac_of_bound=bound_step / dt, compile_s=compile_s,
    )


def measure_copy_bandwidth(nbytes: int = 2 << 30, reps: int = 5) -> float:
    """Device memory bandwidth in bytes/s of a large on-device copy (read + write counted)."""
    n = nbytes // 4
    x = jax.jit(lambda: jnp.zeros((n,), jnp.float32))()
    copy = jax.jit(lambda a: a + 1.0)
    _sync(copy(x))
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        _sync(copy(x))
        best = min(best, time.perf_counter() - t0)
    return 2 * n * 4 / best


SUITES: dict[str, dict[str, Any]] = {
    # One H100: the learner-at-scale targets (docs/benchmarks.md).
    "h100": dict(model="qwen2.5-1.5b", peak_flops=989.4e12, copy_bytes=4 << 30,
                 rl=dict(prompts=8, group=16, prompt_len=2048, max_new=2048,
                         micro_batch_tokens=16384),
                 decode=dict(batch=256, ctx=4096, steps=128),
                 train=dict(batch=16, seq=4096, micro_batch_tokens=16384, chunk=1024, steps=5,
                            remat_policy="dots_no_batch")),
    # CPU smoke test of the same code paths with a tiny model.
    "tiny": dict(model="tiny", peak_flops=1e12, copy_bytes=64 << 20,
                 rl=dict(prompts=2, group=4, prompt_len=16, max_new=16, micro_batch_tokens=64),
                 decode=dict(batch=4, ctx=64, steps=8),
                 train=dict(batch=4, seq=32, micro_batch_tokens=64, chunk=16, steps=2,
                            remat_policy="dots_no_batch")),
}


def _suite_model(name: str) -> ModelConfig:
    if name == "tiny":
        return tiny_config()
    from learner.runtime.device_memory import model_shape

    return model_shape(name, param_dtype="float32", compute_dtype="bfloat16", remat=True,
                       rope=dataclasses.replace(
                           ModelConfig.__dataclass_fields__["rope"].default_factory(), theta=1e6))


def run_suite(name: str, out_dir: Path) -> dict[str, Any]:
    """The three measurements of a suite, each recorded (or its error) as it finishes."""
    import gc

    from learner.bench.rl_step import bench_rl_step

    s = SUITES[name]
    cfg = _suite_model(s["model"])
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = dict(
        suite=name, model=dict(name=s["model"], num_params=cfg.num_params(),
                               num_matmul_params=cfg.num_matmul_params()),
        device=str(jax.devices()[0].device_kind), backend=jax.default_backend(),
        jax_version=jax.__version__, peak_flops=s["peak_flops"], errors=[])
    bw = measure_copy_bandwidth(s["copy_bytes"])
    result["copy_bandwidth_bytes_per_s"] = bw
    log.info("copy bandwidth %.2f TB/s", bw / 1e12)
    jobs = [
        ("rl", lambda: bench_rl_step(cfg, **s["rl"])),
        ("decode", lambda: bench_decode(cfg, bandwidth=bw, **s["decode"])),
        ("train", lambda: bench_train(
            cfg.replace(remat_policy=s["train"]["remat_policy"]), batch=s["train"]["batch"],
            seq=s["train"]["seq"], steps=s["train"]["steps"], warmup=2, chunk=s["train"]["chunk"],
            peak_flops=s["peak_flops"], micro_batch_tokens=s["train"]["micro_batch_tokens"])),
    ]
    for key, job in jobs:
        t0 = time.perf_counter()
        try:
            result[key] = job()
            log.info("%s done in %.0f s: %s", key, time.perf_counter() - t0, result[key])
        except Exception as e:  # noqa: BLE001 - record OOM etc. and go on with the next part
            result["errors"].append(f"{key}: {type(e).__name__}: {str(e)[:800]}")
            log.exception("suite part %s failed", key)
        gc.collect()
        _write(out_dir / "suite.json", result)
    (out_dir / "suite.md").write_text(suite_table(result) + "\n")
    return result


def suite_table(r: dict[str, Any]) -> str:
    """Markdown table of a suite result (the format of docs/benchmarks.md)."""
    lines = [f"{r['model']['name']} ({r['model']['num_params'] / 1e9:.2f}B params, random init) on "
             f"{r['device']}, JAX {r['jax_version']}; copy bandwidth "
             f"{r['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s", "",
             "| measurement | result | target |", "|---|---|---|"]
    if "rl" in r:
        x = r["rl"]
        mem = "-" if x["peak_mem_gb"] is None else f"{x['peak_mem_gb']:.1f} GB"
        lines.append(
            f"| RL step, G={x['group']}, {x['prompts']} prompts x {x['prompt_len']} tokens, "
            f"{x['max_new']} new, {x['micro_batches']} micro-batches | {x['step_s']:.1f} s/step "
            f"(rollout {x['rollout_s']:.1f}, reference {x['reference_s']:.1f}, update "
            f"{x['update_s']:.1f}); rollout {x['rollout_tokens_per_s']:.0f} tok/s; peak {mem} | - |")
    if "decode" in r:
        x = r["decode"]
        lines.append(f"| decode, batch {x['batch']}, context {x['ctx']} | {x['tokens_per_s']:.0f} "
                     f"tok/s = {x['frac_of_bound']:.0%} of the HBM bound "
                     f"({x['bound_tokens_per_s']:.0f}) | >= 70% |")
    if "train" in r:
        x = r["train"]
        mem = "-" if x.get("peak_mem_gb") is None else f"{x['peak_mem_gb']:.1f} GB"
        lines.append(f"| training, seq {x['seq']}, batch {x['batch']}, {x['micro_batches']} "
                     f"micro-batches, remat {x['remat_policy']} | MFU {x['mfu']:.1%}, "
                     f"{x['tokens_per_s']:.0f} tok/s, peak {mem} | >= 50% |")
    lines += [f"| error | {e[:200]} | |" for e in r["errors"]]
    return "\n".join(lines)


def _write(out: Path | None, result: dict[str, Any]) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))


def _table(result: dict[str, Any]) -> str:
    lines = [f"model: {result['model']['num_params'] / 1e9:.3f}B params "
             f"({result['model']['num_matmul_params'] / 1e9:.3f}B matmul), device: {result['device']}"]
    lines.append(f"{'train':<8}{'policy':<15}{'attn':<7}{'batch':>6}{'seq':>6}{'step s':>9}"
                 f"{'tok/s':>11}{'MFU':>8}{'mem GB':>8}")
    for r in result["train"]:
        mem = "-" if r.get("peak_mem_gb") is None else f"{r['peak_mem_gb']:.1f}"
        pol = r["remat_policy"] if r["remat"] else "none"
        lines.append(f"{'':<8}{pol:<15}{r['attention']:<7}{r['batch']:>6}{r['seq']:>6}"
                     f"{r['step_time_s']:>9.4f}{r['tokens_per_s']:>11.0f}{r['mfu']:>8.1%}{mem:>8}")
    lines.append(f"{'decode':<8}{'batch':>6}{'ctx':>6}{'step ms':>9}{'tok/s':>11}"
                 f"{'bound tok/s':>13}{'of bound':>9}")
    for r in result["decode"]:
        lines.append(f"{'':<8}{r['batch']:>6}{r['ctx']:>6}{r['step_time_s'] * 1e3:>9.3f}"
                     f"{r['tokens_per_s']:>11.0f}{r['bound_tokens_per_s']:>13.0f}"
                     f"{r['frac_of_bound']:>9.1%}")
    for e in result["errors"]:
        lines.append(f"error: {e}")
    return "\n".join(lines)


def build_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="learner bench", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="write results JSON here")
    p.add_argument("--tiny", action="store_true", help="tiny model / shapes (CPU smoke test)")
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--train-batch", type=int, default=None)
    p.add_argument("--train-steps", type=int, default=None)
    p.add_argument("--remat-policies", default=None,
                   help="comma list of remat policies to try (full,dots,dots_no_batch,none)")
    p.add_argument("--loss-chunk", type=int, default=None)
    p.add_argument("--attention", choices=["auto", "cudnn", "xla"], default="auto")
    p.add_argument("--decode-batches", default=None, help="comma list, e.g. 64,256")
    p.add_argument("--decode-ctx", type=int, default=None)
    p.add_argument("--decode-steps", type=int, default=None)
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--skip-decode", action="store_true")
    p.add_argument("--peak-tflops", type=float, default=H200_PEAK_BF16_FLOPS / 1e12)
    p.add_argument("--hbm-tbps", type=float, default=H200_HBM_BYTES_PER_S / 1e12)
    p.add_argument("--suite", choices=sorted(SUITES), default=None,
                   help="run a named suite (RL step, decode vs bound, MFU) instead")
    p.add_argument("--out-dir", type=Path, default=Path("bench-out"), help="--suite output folder")
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.tiny:
        cfg = tiny_config(attention_impl=args.attention)
        d = dict(seq=64, batch=2, steps=2, policies="dots_no_batch", chunk=32,
                 dbatches="2,4", ctx=64, dsteps=8)  # fmt: skip
    else:
        cfg = qwen2_1b_config(attention_impl=args.attention)
        d = dict(seq=4096, batch=8, steps=5, policies="dots_no_batch,full", chunk=1024,
                 dbatches="64,256", ctx=2048, dsteps=128)  # fmt: skip
    seq = args.seq or d["seq"]
    policies = (args.remat_policies or d["policies"]).split(",")
    result: dict[str, Any] = dict(
        model=dict(config=cfg.to_hf_dict(), num_params=cfg.num_params(),
                   num_matmul_params=cfg.num_matmul_params()),
        device=str(jax.devices()[0].device_kind), backend=jax.default_backend(),
        jax_version=jax.__version__, peak_flops=args.peak_tflops * 1e12,
        hbm_bytes_per_s=args.hbm_tbps * 1e12, train=[], decode=[], errors=[],
    )  # fmt: skip
    if not args.skip_train:
        for pol in policies:
            tcfg = cfg.replace(remat=pol != "none", remat_policy=pol if pol != "none" else "full")
            try:
                r = bench_train(
                    tcfg, batch=args.train_batch or d["batch"], seq=seq,
                    steps=args.train_steps or d["steps"], warmup=2,
                    chunk=args.loss_chunk or d["chunk"], peak_flops=args.peak_tflops * 1e12,
                )  # fmt: skip
                result["train"].append(r)
                log.info("train %s: %.0f tok/s MFU %.1f%%", pol, r["tokens_per_s"], 100 * r["mfu"])
            except Exception as e:  # noqa: BLE001 - record OOM etc. and continue
                result["errors"].append(f"train {pol}: {type(e).__name__}: {str(e)[:500]}")
                log.exception("train benchmark %s failed", pol)
            _write(args.out, result)
    if not args.skip_decode:
        for b in [int(x) for x in (args.decode_batches or d["dbatches"]).split(",")]:
            try:
                r = bench_decode(cfg, batch=b, ctx=args.decode_ctx or d["ctx"],
                                 steps=args.decode_steps or d["dsteps"],
                                 bandwidth=args.hbm_tbps * 1e12)
                result["decode"].append(r)
                log.info("decode b=%d: %.0f tok/s (%.1f%% of bound)", b, r["tokens_per_s"],
                         100 * r["frac_of_bound"])
            except Exception as e:  # noqa: BLE001
                result["errors"].append(f"decode {b}: {type(e).__name__}: {str(e)[:500]}")
                log.exception("decode benchmark b=%d failed", b)
            _write(args.out, result)
    _write(args.out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return run_and_print(build_parser().parse_args(argv))


def run_and_print(args: argparse.Namespace) -> int:
    """Run what the arguments ask for (a suite, or the train/decode tables) and print the table."""
    if args.suite:
        res = run_suite(args.suite, args.out_dir)
        print(suite_table(res), flush=True)
        return 1 if res["errors"] else 0
    result = run(args)
    print(_table(result), flush=True)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
