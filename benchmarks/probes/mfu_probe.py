"""Where does a training step of the ~1B Qwen2-shaped benchmark model spend its time?

    python benchmarks/probes/mfu_probe.py --variants base,fused --out probe.jsonl        # GPU host

Each variant runs in its own process (so XLA_FLAGS can differ and memory is returned), times
`learner.runtime.train_step` like `learner.bench.throughput`, and the "base" variant also times the gradient alone
(no optimizer) and the decoder layers alone (no LM head), and captures one step with the JAX
profiler, summing device kernel time by kind (matmul / attention / other).
"""

from __future__ import annotations

import argparse
import collections
import functools
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS: dict[str, dict[str, Any]] = {
    "base": dict(),
    "fused": dict(fuse=True),
    "bf16params": dict(param_dtype="bfloat16"),
    "notriton": dict(xla_flags="--xla_gpu_enable_triton_gemm=false"),
    "chunk4096": dict(chunk=4096),
    "chunk512": dict(chunk=512),
    "b16": dict(batch=16),
    "fused_notriton": dict(fuse=True, xla_flags="--xla_gpu_enable_triton_gemm=false"),
    "fused_bf16": dict(fuse=True, param_dtype="bfloat16"),
}


def _kind(name: str) -> str:
    n = name.lower()
    if any(k in n for k in ("cudnn", "fmha", "flash", "sdpa", "attention")):
        return "attention"
    if any(k in n for k in ("gemm", "nvjet", "cutlass", "xmma", "cublas", "matmul", "dot")):
        return "matmul"
    return "other"


def _profile_breakdown(step_fn: Any, state: Any, steps: int) -> tuple[Any, dict[str, Any]]:
    import jax
    from jax.profiler import ProfileData

    d = tempfile.mkdtemp()
    jax.profiler.start_trace(d)
    t0 = time.perf_counter()
    for _ in range(steps):
        state, metrics = step_fn(state)
    jax.block_until_ready(metrics)
    wall = (time.perf_counter() - t0) / steps
    jax.profiler.stop_trace()
    files = glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True)
    per_name: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    lines_seen = []
    for f in files:
        p = ProfileData.from_file(f)
        for plane in p.planes:
            if "GPU" not in plane.name and "gpu" not in plane.name:
                continue
            for line in plane.lines:
                lines_seen.append(f"{plane.name}/{line.name}")
                if not line.name.startswith("Stream"):
                    continue
                for ev in line.events:
                    acc = per_name[ev.name]
                    acc[0] += ev.duration_ns / 1e6 / steps
                    acc[1] += 1
    kinds: dict[str, float] = collections.defaultdict(float)
    for name, (ms, _) in per_name.items():
        kinds[_kind(name)] += ms
    top = sorted(per_name.items(), key=lambda kv: -kv[1][0])[:40]
    return state, dict(
        wall_ms=wall * 1e3, kernel_ms=sum(kinds.values()), by_kind_ms=dict(kinds),
        top=[(n[:140], round(ms, 3), c // steps) for n, (ms, c) in top], lines=sorted(set(lines_seen))[:20],
    )


def _fuse_projections() -> None:
    """Monkeypatch: one [d, (H+2K)D] QKV matmul and one [d, 2F] gate/up matmul per layer."""
    import jax
    import jax.numpy as jnp

    from learner.lm import model as m
    from learner.lm.rope import apply_rope

    def qkv(self: Any, x: Any, cos: Any, sin: Any) -> Any:
        b, s, _ = x.shape
        cdt = self.q_proj.cdt
        w = jnp.concatenate([p.kernel[...].astype(cdt) for p in (self.q_proj, self.k_proj, self.v_proj)], axis=1)
        y = jnp.dot(x.astype(cdt), w)
        if self.q_proj.bias is not None:
            y = y + jnp.concatenate([p.bias[...].astype(cdt) for p in (self.q_proj, self.k_proj, self.v_proj)])
        hq, hk = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q = y[..., :hq].reshape(b, s, self.num_heads, self.head_dim)
        k = y[..., hq:hq + hk].reshape(b, s, self.num_kv_heads, self.head_dim)
        v = y[..., hq + hk:].reshape(b, s, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def mlp(self: Any, x: Any) -> Any:
        cdt = self.gate_proj.cdt
        f = self.gate_proj.kernel.shape[1]
        w = jnp.concatenate([self.gate_proj.kernel[...].astype(cdt), self.up_proj.kernel[...].astype(cdt)], axis=1)
        y = jnp.dot(x.astype(cdt), w)
        return self.down_proj(jax.nn.silu(y[..., :f]) * y[..., f:])

    m.Attention.qkv = qkv
    m.MLP.__call__ = mlp


def run_variant(name: str, steps: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from learner.bench.throughput import (
        H200_PEAK_BF16_FLOPS,
        qwen2_1b_config,
        train_flops_per_token,
    )
    from learner.lm.model import Transformer
    from learner.lm.sharding import MeshConfig, batch_sharding, create_sharded_model, make_mesh
    from learner.runtime.losses import lm_loss_sum_count
    from learner.runtime.train_step import (
        OptimizerConfig,
        create_train_state,
        make_optimizer,
        train_step,
    )

    v = VARIANTS[name]
    if v.get("fuse"):
        _fuse_projections()
    batch, seq, chunk = v.get("batch", 8), 4096, v.get("chunk", 1024)
    cfg = qwen2_1b_config(remat=False, param_dtype=v.get("param_dtype", "float32"))
    mesh = make_mesh(MeshConfig(data=1, fsdp=-1, tensor=1))
    model = create_sharded_model(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    tx = make_optimizer(OptimizerConfig(learning_rate=1e-5, weight_decay=0.1, grad_clip_norm=1.0))
    state = create_train_state(model, tx, mesh=mesh)
    del model
    rng = np.random.default_rng(0)
    data = jax.device_put({
        "tokens": rng.integers(0, cfg.vocab_size, (batch, seq)).astype(np.int32),
        "loss_mask": np.ones((batch, seq), np.int32),
    }, batch_sharding(mesh))
    loss_fn = functools.partial(lm_loss_sum_count, chunk_size=chunk)

    def step(s: Any) -> Any:
        return train_step(s, data, loss_fn)

    t0 = time.perf_counter()
    state, metrics = step(state)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - t0
    state, metrics = step(state)
    jax.block_until_ready(metrics)
    t0 = time.perf_counter()
    for _ in range(steps):
        state, metrics = step(state)
    jax.block_until_ready(metrics)
    dt = (time.perf_counter() - t0) / steps
    fpt = train_flops_per_token(cfg, seq)
    out: dict[str, Any] = dict(
        variant=name, batch=batch, seq=seq, chunk=chunk, xla_flags=os.environ.get("XLA_FLAGS", ""),
        step_s=dt, mfu=fpt * batch * seq / dt / H200_PEAK_BF16_FLOPS, compile_s=compile_s,
        loss=float(metrics["loss"]),
    )
    try:
        out["peak_mem_gb"] = jax.devices()[0].memory_stats()["peak_bytes_in_use"] / 1e9
    except Exception:  # noqa: BLE001
        pass
    if name == "base":
        state, out["profile"] = _profile_breakdown(step, state, 2)
        params = state.params
        graphdef = state.graphdef

        def grads_only(p: Any) -> Any:
            def obj(p: Any) -> Any:
                s, c = loss_fn(nnx.merge(graphdef, p), data)
                return s / c
            return jax.value_and_grad(obj)(p)

        def layers_only(p: Any) -> Any:
            def obj(p: Any) -> Any:
                h, _ = nnx.merge(graphdef, p).hidden_states(data["tokens"])
                return jnp.mean(h.astype(jnp.float32) ** 2)
            return jax.value_and_grad(obj)(p)

        for label, fn in (("grads_only", grads_only), ("layers_only", layers_only)):
            f = jax.jit(fn)
            jax.block_until_ready(f(params))
            jax.block_until_ready(f(params))
            t0 = time.perf_counter()
            for _ in range(steps):
                r = f(params)
            jax.block_until_ready(r)
            out[f"{label}_s"] = (time.perf_counter() - t0) / steps
        # Reference matmul rates for the shapes that dominate.
        rates = {}
        for label, (m_, k_, n_) in {
            "8192^3": (8192, 8192, 8192), "mlp_up": (batch * seq, 2048, 5632),
            "mlp_down": (batch * seq, 5632, 2048), "q": (batch * seq, 2048, 2048),
            "kv": (batch * seq, 2048, 1024), "head_chunk": (batch * chunk, 2048, 151936),
        }.items():
            a = jnp.ones((m_, k_), jnp.bfloat16)
            b = jnp.ones((k_, n_), jnp.bfloat16)
            mm = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.bfloat16))
            jax.block_until_ready(mm(a, b))
            t0 = time.perf_counter()
            for _ in range(10):
                c = mm(a, b)
            jax.block_until_ready(c)
            rates[label] = 2 * m_ * k_ * n_ / ((time.perf_counter() - t0) / 10) / 1e12
            del a, b, c
        out["matmul_tflops"] = rates
        # cuDNN attention fwd+bwd at the training shape (16 layers' worth).
        q = jnp.ones((batch, seq, 16, 128), jnp.bfloat16) * 0.01
        kv = jnp.ones((batch, seq, 8, 128), jnp.bfloat16) * 0.01

        def attn_loss(q: Any, k: Any, v: Any) -> Any:
            o = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")
            return jnp.sum(o.astype(jnp.float32))

        g = jax.jit(jax.grad(attn_loss, argnums=(0, 1, 2)))
        jax.block_until_ready(g(q, kv, kv))
        t0 = time.perf_counter()
        for _ in range(10):
            r = g(q, kv, kv)
        jax.block_until_ready(r)
        per_layer = (time.perf_counter() - t0) / 10
        attn_flops = 12 * seq * 16 * 128 / 2 * batch * seq  # fwd+bwd, causal-halved, one layer
        out["attention_layer_ms"] = per_layer * 1e3
        out["attention_tflops"] = attn_flops / per_layer / 1e12
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="base")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--out", type=Path, default=Path("probe.jsonl"))
    ap.add_argument("--budget", type=float, default=1e9, help="start no variant after this many seconds")
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run_variant(args.one, args.steps)), flush=True)
        return 0
    rows = []
    start = time.time()
    for name in args.variants.split(","):
        left = args.budget - (time.time() - start)
        if left < 60:
            print(f"skipping {name}: budget spent", flush=True)
            continue
        env = dict(os.environ)
        if VARIANTS[name].get("xla_flags"):
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + VARIANTS[name]["xla_flags"]).strip()
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, __file__, "--one", name, "--steps", str(args.steps)],
                               env=env, capture_output=True, text=True,
                               timeout=min(args.timeout, left))
            res = [json.loads(ln[7:]) for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            row = res[0] if res else {"variant": name, "error": p.stderr[-1500:]}
        except subprocess.TimeoutExpired:
            row = {"variant": name, "error": f"timeout after {min(args.timeout, left):.0f}s"}
        row["wall_s"] = time.time() - t0
        rows.append(row)
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: v for k, v in row.items() if k not in ("profile",)})[:1500], flush=True)
        if "profile" in row:
            pr = row["profile"]
            print(f"profile: wall {pr['wall_ms']:.1f} ms, kernels {pr['kernel_ms']:.1f} ms, {pr['by_kind_ms']}")
            for n, ms, c in pr["top"]:
                print(f"  {ms:9.2f} ms x{c:<4} {n}")
            print("  lines:", pr["lines"])
    print(f"{'variant':<16}{'step s':>9}{'MFU':>8}{'mem GB':>8}{'compile s':>11}")
    for r in rows:
        if "error" in r:
            print(f"{r['variant']:<16} error: {r['error'][-300:]}")
        else:
            print(f"{r['variant']:<16}{r['step_s']:>9.4f}{r['mfu']:>8.1%}{r.get('peak_mem_gb', 0):>8.1f}{r['compile_s']:>11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
