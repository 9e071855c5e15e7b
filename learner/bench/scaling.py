"""Data-parallel scaling over the GPUs of one host: the same global batch on 1 and on N devices.

    python -m learner.bench.scaling run --devices 1 --out-dir $OUT/scaling     # the first GPU
    python -m learner.bench.scaling run --devices all --out-dir $OUT/scaling   # every GPU
    python -m learner.bench.scaling compare --out-dir $OUT/scaling             # the table
    python -m learner.bench.scaling big --config configs/gpu_cluster.py --out-dir $OUT/big
    python -m learner.bench.scaling parity                                     # sharded == single
    bash benchmarks/gpu_multi_bench.sh                                            # all of it, GPU host

`run` measures, on the first `--devices` devices (mesh: every device on the fsdp axis), one
GRPO step of `learner.bench.rl_step` (rollout from the bf16 rollout copy with one shared prefill per
prompt, reference log-probs, a micro-batched update) and `learner.bench.throughput`'s training step, and
writes `scaling_<N>.json`. The global batch is the suite's whatever N is; the micro-batch is
fixed *per device* (`micro_batch_tokens_per_device` x N tokens over the mesh), so each device
does the same work per micro-batch at every N. Run each N in its own process: the peaks of
device memory are per process. `--parts rl` measures the RL step alone.

Across processes (one `jax.distributed` job, as `learner train` runs on several hosts), the same
command in every process measures the RL step on the devices of all of them, each process
sampling its share of the rows as `learner train` does; process 0 writes `scaling_<N>_p<P>.json`
(its own devices' memory peaks), a row of its own in the table:

    scripts/learner_processes.sh 2 -m learner.bench.scaling run --parts rl --out-dir $OUT/scaling

`compare` reads every `scaling_<N>.json` and prints seconds per step by phase, rollout tokens/s,
training MFU per GPU and the scaling efficiency, N-device throughput over N x the one-device
throughput (= t_1 / (N t_N) for one global batch), per phase and for the whole step. Targets
(issue "multi-GPU run"): >= 90% on 2-4 GPUs, >= 85% on 8.

`big` takes a run config (default configs/gpu_cluster.py: a 7B Qwen2-shaped policy, random init)
on every device: its memory plan (`learner.runtime.device_memory`), then one SFT step at the config's
`sft.batch_size` x `max_seq_len` and one RL step at `rl.tasks_per_step` x `rl.group_size`
samples of `sampling.max_new_tokens` new tokens, with the measured peak per device next to the
plan. A plan that does not fit is reported and not run (`--force` runs it anyway).

`parity` checks on the devices present (real GPUs, or simulated CPU devices) that two micro-batched
training steps and greedy generation (static, shared prefill, and continuous batching) on a
sharded mesh equal those on one device.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax

from learner.bench.args import add_steps_per_check

log = logging.getLogger(__name__)

# Global batches of the scaling measurements (the same at every N). `1.5b`: the learner-at-scale
# sizes of one H100 (learner.bench.throughput SUITES["h100"]); `tiny`: the same code on CPU devices.
SUITES: dict[str, dict[str, Any]] = {
    "1.5b": dict(model="qwen2.5-1.5b", peak_flops=989.4e12,
                 rl=dict(prompts=8, group=16, prompt_len=2048, max_new=2048,
                         micro_batch_tokens_per_device=16384),
                 train=dict(batch=16, seq=4096, micro_batch_tokens_per_device=16384, chunk=1024,
                            steps=5, remat_policy="dots_no_batch")),
    "tiny": dict(model="tiny", peak_flops=1e12,
                 rl=dict(prompts=2, group=4, prompt_len=16, max_new=16, micro_batch_tokens_per_device=64),
                 train=dict(batch=8, seq=32, micro_batch_tokens_per_device=64, chunk=16, steps=2,
                            remat_policy="dots_no_batch")),
}
TARGETS = {2: 0.90, 3: 0.90, 4: 0.90, 8: 0.85}


class ScalingArgumentError(ValueError):
    """A scaling run asked for something its devices cannot give (a tensor split, say)."""


def pick_devices(spec: str | int) -> list[jax.Device]:
    """`all`, or the first N devices (an error naming what there is when N is too many)."""
    devices = jax.devices()
    if str(spec) == "all":
        return devices
    n = int(spec)
    if n < 1 or n > len(devices):
        raise SystemExit(f"--devices {n}: this process sees {len(devices)} device(s) "
                         f"({devices[0].device_kind})")
    return devices[:n]


PARTS = ("rl", "train")


def result_name(devices: int, tensor: int = 1, processes: int = 1) -> str:
    """scaling_<N>.json, with _tensor<T> for a tensor split and _p<P> for P processes."""
    return (f"scaling_{devices}" + ("" if tensor == 1 else f"_tensor{tensor}")
            + ("" if processes == 1 else f"_p{processes}") + ".json")


def run_scaling(suite: str, devices: Sequence[jax.Device], out_dir: Path, steps_per_check: int = 1,
                tensor: int = 1, parts: Sequence[str] = PARTS) -> dict[str, Any]:
    """One suite's RL and training steps (`parts`) on `devices`; written as scaling_<N>.json (with
    `tensor` > 1, scaling_<N>_tensor<T>.json: the mesh's tensor axis splits the weights, and the
    rollout copy's reads, `tensor` ways; the rest stay on fsdp). `steps_per_check`: the rollout's
    decode steps per check of its loop condition (`sampling.steps_per_check`). Across P processes
    only the RL step runs (the training step's benchmark feeds one process's batch) and process 0
    writes scaling_<N>_p<P>.json."""
    from learner.bench.rl_step import bench_rl_step, local_devices_of, peak_gb_per_device
    from learner.bench.throughput import _suite_model, bench_train

    s = SUITES[suite]
    n = len(devices)
    processes = jax.process_count()
    if tensor < 1 or n % tensor:
        raise ScalingArgumentError(f"tensor={tensor} must be >= 1 and divide the {n} device(s)")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        raise ScalingArgumentError(f"parts {','.join(parts)}: choose from {','.join(PARTS)}")
    if processes > 1 and "train" in parts:
        raise ScalingArgumentError(f"{processes} processes: only the RL step runs across processes (--parts rl)")
    cfg = _suite_model(s["model"])
    result: dict[str, Any] = dict(
        suite=suite, devices=n, tensor=tensor, processes=processes, device_kind=str(devices[0].device_kind),
        backend=jax.default_backend(), jax_version=jax.__version__,
        model=dict(name=s["model"], num_params=cfg.num_params()), peak_flops_per_device=s["peak_flops"], errors=[])
    writer = jax.process_index() == 0
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / result_name(n, tensor, processes)
    rl = {k: v for k, v in s["rl"].items() if k != "micro_batch_tokens_per_device"}
    tr = s["train"]
    jobs = [
        ("rl", lambda: bench_rl_step(cfg, **rl, devices=devices,
                                     micro_batch_tokens=s["rl"]["micro_batch_tokens_per_device"] * n,
                                     steps_per_check=steps_per_check, tensor=tensor)),
        ("train", lambda: bench_train(
            cfg.replace(remat_policy=tr["remat_policy"]), batch=tr["batch"], seq=tr["seq"],
            steps=tr["steps"], warmup=2, chunk=tr["chunk"], peak_flops=s["peak_flops"],
            micro_batch_tokens=tr["micro_batch_tokens_per_device"] * n, devices=devices, tensor=tensor)),
    ]
    for key, job in jobs:
        if key not in parts:
            continue
        t0 = time.perf_counter()
        try:
            result[key] = job()
            log.info("%s on %d device(s) done in %.0f s: %s", key, n, time.perf_counter() - t0, result[key])
        except Exception as e:  # noqa: BLE001 - record an OOM and go on with the next part
            result["errors"].append(f"{key}: {type(e).__name__}: {str(e)[:800]}")
            log.exception("scaling part %s failed on %d device(s)", key, n)
            if processes > 1:  # the other processes may be inside a collective this one left
                raise
        if writer:
            path.write_text(json.dumps(result, indent=2))
    result["peak_gb_per_device"] = peak_gb_per_device(local_devices_of(devices))
    if writer:
        path.write_text(json.dumps(result, indent=2))
    return result


def efficiency(t_one: float, t_n: float, n: int) -> float:
    """Scaling efficiency of one global batch: (1/t_n) / (n * 1/t_one)."""
    return t_one / (n * t_n)


def load_runs(out_dir: Path) -> dict[tuple[int, int, int], dict[str, Any]]:
    """Every scaling_*.json, keyed by (devices, tensor, processes)."""
    runs = {}
    for p in sorted(out_dir.glob("scaling_*.json")):
        r = json.loads(p.read_text())
        runs[int(r["devices"]), int(r.get("tensor", 1)), int(r.get("processes", 1))] = r
    return runs


def compare_table(runs: dict[tuple[int, ...], dict[str, Any]]) -> str:
    """Markdown: one row per (devices, tensor split[, processes]), as `load_runs` keys them,
    efficiencies against the one-device run."""
    runs = {(k[0], k[1], k[2] if len(k) > 2 else 1): r for k, r in runs.items()}
    if not runs:
        return "no scaling_*.json: run `learner.bench.scaling run` first"
    one = runs.get((1, 1, 1), {})
    head = runs[min(runs)]
    lines = [f"{head['model']['name']} ({head['model']['num_params'] / 1e9:.2f}B params, random init) on "
             f"{head['device_kind']}, JAX {head['jax_version']}; same global batch at every N; rollout decode "
             f"steps per loop check: {sorted({(r.get('rl') or {}).get('steps_per_check', 1) for r in runs.values()})}",
             *([] if one else ["no one-device run (scaling_1.json), so no efficiencies: run "
                               "`learner.bench.scaling run --devices 1` for them"]), "",
             "| GPUs | RL step s (rollout / reference / update) | rollout tok/s | RL efficiency "
             "(rollout / reference / update) | train step s | train MFU per GPU | train efficiency | "
             "peak GB per GPU | target |",
             "|---|---|---|---|---|---|---|---|---|"]

    def eff(key: str, part: str, n: int, r: dict[str, Any]) -> float | None:
        if key not in one or key not in r:
            return None
        return efficiency(one[key][part], r[key][part], n)

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    for n, t, procs in sorted(runs):
        r = runs[n, t, procs]
        rl, tr = r.get("rl"), r.get("train")
        rl_s = (f"{rl['step_s']:.2f} ({rl['rollout_s']:.2f} / {rl['reference_s']:.2f} / {rl['update_s']:.2f})"
                if rl else "-")
        tok = f"{rl['rollout_tokens_per_s']:.0f}" if rl else "-"
        rl_eff = (f"{pct(eff('rl', 'step_s', n, r))} ({pct(eff('rl', 'rollout_s', n, r))} / "
                  f"{pct(eff('rl', 'reference_s', n, r))} / {pct(eff('rl', 'update_s', n, r))})") if rl else "-"
        tr_s = f"{tr['step_time_s']:.3f}" if tr else "-"
        mfu = f"{tr['mfu']:.1%}" if tr else "-"
        peaks = [p for p in r.get("peak_gb_per_device") or [] if p is not None]
        peak = f"{max(peaks):.1f}" if peaks else "-"
        target = f">= {TARGETS[n]:.0%}" if n in TARGETS else "-"
        label = str(n) + "".join(f" ({x})" for x in ([f"tensor {t}"] if t > 1 else [])
                                 + ([f"{procs} processes"] if procs > 1 else []))
        lines.append(f"| {label} | {rl_s} | {tok} | {rl_eff} | {tr_s} | {mfu} | "
                     f"{pct(eff('train', 'step_time_s', n, r))} | {peak} | {target} |")
    for n, t, procs in sorted(runs):
        where = f"{n} devices" + ("" if t == 1 else f", tensor {t}") + ("" if procs == 1 else f", {procs} processes")
        lines += [f"| error ({where}) | {e[:200]} | | | | | | | |" for e in runs[n, t, procs].get("errors", [])]
    return "\n".join(lines)


# --- a run config's policy on every device: memory plan against measured peaks -----------------
def run_big(config_path: str, model_name: str, devices: Sequence[jax.Device], out_dir: Path,
            force: bool = False, prompt_len: int | None = None) -> dict[str, Any]:
    """One SFT step and one RL step at a run config's sizes, a random `model_name`-shaped policy."""
    import functools

    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from learner.bench.rl_step import peak_gb_per_device, timed_rl_step
    from learner.bench.throughput import _suite_model
    from learner.config_check import load_config_file
    from learner.lm.model import Transformer
    from learner.lm.sampler import Sampler, SamplingConfig
    from learner.lm.sharding import MeshConfig, create_sharded_model, make_mesh
    from learner.rl.grpo import GRPOConfig, make_grpo_loss
    from learner.rl.reference import reference_copy
    from learner.runtime.device_memory import PlanInputs, plan_memory
    from learner.runtime.losses import lm_loss_sum_count
    from learner.runtime.scale import step
    from learner.runtime.train_step import OptimizerConfig, create_train_state, make_optimizer

    cfg = load_config_file(config_path)
    n = len(devices)
    model_cfg = _suite_model(model_name).replace(
        param_dtype=str(cfg.model.param_dtype), compute_dtype=str(cfg.model.compute_dtype),
        remat=bool(cfg.model.remat))
    device_bytes = _device_bytes(devices[0])
    plan = plan_memory(model_cfg, PlanInputs.from_config(cfg, n), device_bytes or float("inf"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"big_{n}.json"
    result: dict[str, Any] = dict(
        config=config_path, model=model_name, num_params=model_cfg.num_params(), devices=n,
        device_kind=str(devices[0].device_kind), plan_text=plan.format(f"{model_name} on {n} devices"),
        plan_gb_per_device=plan.total / 1e9, plan_fits=plan.fits, errors=[])
    print(result["plan_text"], flush=True)
    path.write_text(json.dumps(result, indent=2))
    if not plan.fits and not force:
        result["errors"].append("the memory plan does not fit: not run (--force runs it anyway)")
        path.write_text(json.dumps(result, indent=2))
        return result
    mc = MeshConfig(int(cfg.mesh.data), int(cfg.mesh.fsdp), int(cfg.mesh.tensor))
    mesh = make_mesh(mc, devices)
    t0 = time.perf_counter()
    model = create_sharded_model(lambda: Transformer(model_cfg, rngs=nnx.Rngs(0)), mesh)
    state = create_train_state(model, make_optimizer(OptimizerConfig(learning_rate=1e-6, grad_clip_norm=1.0)),
                               mesh=mesh)
    del model
    result["build_s"] = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    seq = int(cfg.max_seq_len)
    mbt = int(cfg.train.micro_batch_tokens)
    try:  # SFT: sft.batch_size rows of max_seq_len tokens
        rows = int(cfg.sft.batch_size)
        batch = {"tokens": rng.integers(0, model_cfg.vocab_size, (rows, seq)).astype(np.int32),
                 "loss_mask": np.ones((rows, seq), np.float32)}
        loss = functools.partial(lm_loss_sum_count, chunk_size=512)
        times = []
        for _ in range(2):  # the first compiles
            t0 = time.perf_counter()
            state, metrics = step(state, batch, loss, mbt)
            jax.block_until_ready(metrics)
            times.append(time.perf_counter() - t0)
        result["sft"] = dict(rows=rows, seq=seq, micro_batch_tokens=mbt, first_step_s=times[0], step_s=times[1],
                             tokens_per_s=rows * seq / times[1], loss=float(metrics["loss"]))
    except Exception as e:  # noqa: BLE001 - an OOM is a result here
        result["errors"].append(f"sft: {type(e).__name__}: {str(e)[:800]}")
        log.exception("SFT step failed")
    result["peak_gb_after_sft"] = peak_gb_per_device(devices)
    path.write_text(json.dumps(result, indent=2))
    try:  # RL: tasks_per_step prompts x group_size samples, sampling.batch_size rows per generate
        ref = reference_copy(state.params, jnp.dtype(model_cfg.jnp_compute_dtype).name)
        sampler = Sampler(state.model, mesh=mesh, min_bucket=64,
                          steps_per_check=int(cfg.sampling.steps_per_check))
        new = int(cfg.sampling.max_new_tokens)
        p_len = prompt_len or (seq - new)
        prompts, group = int(cfg.rl.tasks_per_step), int(cfg.rl.group_size)
        per_call = max(group, int(cfg.sampling.batch_size) // group * group)
        sc = SamplingConfig(max_new_tokens=new, temperature=1.0)
        loss_fn = make_grpo_loss(GRPOConfig(kl_coef=float(cfg.rl.grpo.kl_coef)))
        runs = []
        for i in range(2):  # the first compiles
            distinct = rng.integers(0, model_cfg.vocab_size, (prompts, p_len)).astype(np.int32)
            state, run = timed_rl_step(state, ref, sampler, distinct, group, sc, jax.random.PRNGKey(i), loss_fn,
                                       mbt, rng, rows_per_generate=per_call)
            runs.append(run)
        result["rl"] = dict(prompts=prompts, group=group, prompt_len=p_len, max_new=new,
                            rows_per_generate=per_call, first_step_s=runs[0]["step_s"], **runs[1])
    except Exception as e:  # noqa: BLE001
        result["errors"].append(f"rl: {type(e).__name__}: {str(e)[:800]}")
        log.exception("RL step failed")
    result["peak_gb_per_device"] = peak_gb_per_device(devices)
    path.write_text(json.dumps(result, indent=2))
    return result


def _device_bytes(device: jax.Device) -> float | None:
    try:
        limit = (device.memory_stats() or {}).get("bytes_limit")
    except Exception:  # noqa: BLE001 - backends without memory stats
        return None
    return float(limit) if limit else None


def big_table(r: dict[str, Any]) -> str:
    peaks = [p for p in r.get("peak_gb_per_device") or [] if p is not None]
    peak = f"{max(peaks):.1f} GB" if peaks else "not reported by this backend"
    lines = [f"{r['model']} ({r['num_params'] / 1e9:.2f}B params, random init) on {r['devices']} x "
             f"{r['device_kind']} ({r['config']})", "",
             "| measurement | result |", "|---|---|",
             f"| memory plan per device | {r['plan_gb_per_device']:.1f} GB ({'fits' if r['plan_fits'] else 'does not fit'}) |",
             f"| measured peak per device | {peak} |"]
    if "sft" in r:
        x = r["sft"]
        lines.append(f"| SFT step, {x['rows']} x {x['seq']} tokens, micro-batches of {x['micro_batch_tokens']} "
                     f"| {x['step_s']:.2f} s ({x['tokens_per_s']:.0f} tok/s); first (compiles) {x['first_step_s']:.1f} s |")
    if "rl" in r:
        x = r["rl"]
        lines.append(f"| RL step, {x['prompts']} prompts x G={x['group']}, {x['prompt_len']}-token prompts, "
                     f"{x['max_new']} new | {x['step_s']:.1f} s (rollout {x['rollout_s']:.1f}, reference "
                     f"{x['reference_s']:.1f}, update {x['update_s']:.1f}); first {x['first_step_s']:.1f} s |")
    lines += [f"| error | {e[:300]} |" for e in r.get("errors", [])]
    return "\n".join(lines)


# --- sharded results equal single-device results ----------------------------------------------
def parity_mesh_config(n: int) -> Any:
    """A mesh over n devices that uses every axis n allows: data=2 from 4 devices, tensor=2 from 8."""
    from learner.lm.sharding import MeshConfig

    data = 2 if n >= 4 and n % 2 == 0 else 1
    tensor = 2 if n >= 8 and n % 4 == 0 else 1
    return MeshConfig(data=data, fsdp=-1, tensor=tensor)


def compare_updates(init: Sequence[Any], single: Sequence[Any], sharded: Sequence[Any],
                    tol: float = 1e-2) -> tuple[float, float]:
    """Each weight's update on the sharded layout against the one-device update, in norm:
    ||sharded - single|| < tol * ||single - init|| per weight (AssertionError naming the weight
    otherwise). Returns (largest element difference, largest norm ratio).

    Not element by element: AdamW moves a weight whose gradient is near its eps by a fraction of
    lr that depends on that tiny gradient's reduction order, so single elements of two correct
    layouts can differ by a good part of one step (0.14 x lr seen on an H100), while a layout that
    computes wrong gradients differs in the update as a whole."""
    import numpy as np

    worst, worst_ratio = 0.0, 0.0
    for i, (a0, a, b) in enumerate(zip(init, single, sharded, strict=True)):
        a0, a, b = (np.asarray(x, np.float64) for x in (a0, a, b))
        ratio = float(np.linalg.norm(b - a) / max(float(np.linalg.norm(a - a0)), 1e-12))
        assert ratio < tol, f"weight {i} {a.shape}: the sharded update differs from the one-device update by " \
                            f"{ratio:.2e} of its norm (at most {tol:g})"
        worst, worst_ratio = max(worst, float(np.max(np.abs(b - a)))), max(worst_ratio, ratio)
    return worst, worst_ratio


def check_parity(devices: Sequence[jax.Device] | None = None) -> dict[str, Any]:
    """Two micro-batched training steps and greedy generation (with and without a shared prefill)
    on a sharded mesh of `devices` against one device: losses, gradient norms and weights within
    float32 reduction-order tolerance, generated tokens equal. Raises AssertionError otherwise."""
    import functools

    import numpy as np
    from flax import nnx

    from learner.bench.throughput import tiny_config
    from learner.lm.engine import ContinuousSampler
    from learner.lm.model import Transformer
    from learner.lm.sampler import Sampler, SamplingConfig
    from learner.lm.sharding import create_sharded_model, make_mesh, shard_batch
    from learner.runtime.losses import lm_loss_sum_count
    from learner.runtime.train_step import (
        OptimizerConfig,
        create_train_state,
        make_optimizer,
        train_step,
    )

    devices = list(devices or jax.devices())
    if len(devices) < 2:
        raise SystemExit("parity needs at least 2 devices (on a CPU: "
                         "XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu)")
    cfg = tiny_config(vocab_size=1024, hidden_size=256, intermediate_size=512, num_layers=2, num_heads=8,
                      num_kv_heads=4, head_dim=32, compute_dtype="float32")  # exact: no bf16 rounding
    loss = functools.partial(lm_loss_sum_count, chunk_size=128)
    rows, seq = 16, 256
    mesh_cfg = parity_mesh_config(len(devices))
    single, sharded = make_mesh(mesh_cfg.__class__(data=1, fsdp=1, tensor=1), devices[:1]), make_mesh(mesh_cfg, devices)

    def state(mesh: Any) -> Any:
        model = create_sharded_model(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
        return create_train_state(model, make_optimizer(OptimizerConfig(learning_rate=1e-3)), mesh=mesh)

    rng = np.random.default_rng(0)
    host = {"tokens": rng.integers(0, cfg.vocab_size, (rows, seq)).astype(np.int32),
            "loss_mask": (rng.random((rows, seq)) < 0.7).astype(np.float32)}
    report: dict[str, Any] = {"devices": len(devices), "mesh": dataclasses.asdict(mesh_cfg)}
    with jax.default_matmul_precision("highest"):  # no TF32 on GPUs: layouts differ in order only
        s1, sn = state(single), state(sharded)
        init = [np.asarray(x) for x in jax.tree.leaves(s1.params)]
        b1, bn = shard_batch(host, single), shard_batch(host, sharded)
        for i in range(2):
            s1, m1 = train_step(s1, b1, loss, 1)
            sn, mn = train_step(sn, bn, loss, 2)
            np.testing.assert_allclose(float(mn["loss"]), float(m1["loss"]), rtol=1e-5)
            np.testing.assert_allclose(float(mn["grad_norm"]), float(m1["grad_norm"]), rtol=1e-4)
            report[f"step{i}"] = {"loss": [float(m1["loss"]), float(mn["loss"])],
                                  "grad_norm": [float(m1["grad_norm"]), float(mn["grad_norm"])]}
        report["max_weight_diff"], report["max_update_diff_ratio"] = compare_updates(
            init, jax.tree.leaves(s1.params), jax.tree.leaves(sn.params))
        prompts = [[5, 6, 7, 8], [9, 10, 11]] * 8
        sc = SamplingConfig(max_new_tokens=12, temperature=0.0)
        m1, mn = state(single).model, state(sharded).model  # same init, two layouts
        r1 = Sampler(m1, mesh=single).generate(prompts, sc, jax.random.PRNGKey(0))
        rn = Sampler(mn, mesh=sharded).generate(prompts, sc, jax.random.PRNGKey(0))
        rg = Sampler(mn, mesh=sharded).generate([prompts[0]] * 8 + [prompts[1]] * 8, sc,
                                                 jax.random.PRNGKey(0), group=8)
        # Continuous batching on the sharded mesh: rows refilled one at a time, same tokens.
        rc = ContinuousSampler(mn, rows=4, chunk=3, refill_batch=1, mesh=sharded).generate(
            prompts, sc, jax.random.PRNGKey(0))
    np.testing.assert_array_equal(rn.tokens, r1.tokens)
    np.testing.assert_allclose(rn.logprobs, r1.logprobs, rtol=1e-4, atol=1e-4)
    # A prefill shared by each group of 8 equal prompts gives each row what its own prefill gave.
    np.testing.assert_array_equal(rg.tokens[:8], np.repeat(r1.tokens[:1], 8, axis=0))
    np.testing.assert_array_equal(rg.tokens[8:], np.repeat(r1.tokens[1:2], 8, axis=0))
    np.testing.assert_allclose(rg.logprobs[8:], np.repeat(r1.logprobs[1:2], 8, axis=0), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(rc.tokens, r1.tokens)
    np.testing.assert_allclose(rc.logprobs, r1.logprobs, rtol=1e-4, atol=1e-4)
    report["generation"] = "equal"
    return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m learner.bench.scaling", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="the suite's RL and training steps on the first N devices")
    r.add_argument("--devices", default="all", help="a count, or all")
    r.add_argument("--suite", choices=sorted(SUITES), default="1.5b")
    r.add_argument("--out-dir", type=Path, default=Path("bench-out/scaling"))
    add_steps_per_check(r)
    r.add_argument("--parts", default=",".join(PARTS), help="what to measure: rl, train or both (comma-separated)")
    r.add_argument("--tensor", type=int, default=1,
                   help="devices on the mesh's tensor axis (splits the weights and the rollout copy's reads); "
                        "must divide the device count")
    c = sub.add_parser("compare", help="the table of every scaling_<N>.json in --out-dir")
    c.add_argument("--out-dir", type=Path, default=Path("bench-out/scaling"))
    b = sub.add_parser("big", help="a run config's policy on every device: memory plan vs measured peak")
    b.add_argument("--config", default="configs/gpu_cluster.py")
    b.add_argument("--model", default="qwen2.5-7b", help="a learner.runtime.device_memory shape, or tiny")
    b.add_argument("--devices", default="all", help="a count, or all")
    b.add_argument("--prompt-len", type=int, default=None,
                   help="RL prompt tokens (default: max_seq_len - sampling.max_new_tokens)")
    b.add_argument("--force", action="store_true", help="run even when the memory plan does not fit")
    b.add_argument("--out-dir", type=Path, default=Path("bench-out/big"))
    q = sub.add_parser("parity", help="sharded training and generation equal one device's")
    q.add_argument("--devices", default="all", help="a count (>= 2), or all")
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = build_parser().parse_args(argv)
    if args.command == "compare":
        print(compare_table(load_runs(args.out_dir)), flush=True)
        return 0
    if args.command == "run":
        from learner.runtime.distributed import maybe_initialize_distributed

        maybe_initialize_distributed()  # several processes when LEARNER_NUM_PROCESSES etc. say so
    devices = pick_devices(args.devices)
    if args.command == "run":
        try:
            res = run_scaling(args.suite, devices, args.out_dir, args.steps_per_check, args.tensor,
                              [x for x in args.parts.split(",") if x])
        except ScalingArgumentError as err:
            raise SystemExit(f"learner.bench.scaling run: {err}") from None
        print(json.dumps({k: res.get(k) for k in ("devices", "rl", "train", "errors")}, indent=1), flush=True)
        return 1 if res["errors"] else 0
    if args.command == "big":
        res = run_big(args.config, args.model, devices, args.out_dir, args.force, args.prompt_len)
        print(big_table(res), flush=True)
        return 1 if res["errors"] else 0
    print("PARITY " + json.dumps(check_parity(devices)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
