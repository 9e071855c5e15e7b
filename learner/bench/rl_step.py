"""One GRPO step end to end on a random model: rollout, reference log-probs, micro-batched update.

The step is what `learner.stages.rl.run_rl` does per step minus the farm: `prompts` distinct prompts of
`prompt_len` random tokens, `group` samples of each (one shared prefill per prompt) decoded to
`max_new` tokens from the bf16 rollout copy, reference log-probs from a compute-dtype reference
copy, then one GRPO update with `micro_batch_tokens` tokens per micro-batch and the refresh of the
rollout copy. Random weights never emit EOS, so every row decodes `max_new` tokens: the
worst case of a static batch. The first step compiles; the timed step is the second.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from learner.lm.config import ModelConfig
from learner.lm.model import Transformer
from learner.lm.sampler import Sampler, SamplingConfig
from learner.lm.sharding import MeshConfig, create_sharded_model, make_mesh
from learner.rl.grpo import GRPOConfig, make_grpo_loss
from learner.rl.reference import batch_reference_logprobs, reference_copy
from learner.rl.rollout import generate_rows
from learner.runtime.scale import micro_batches_for, step
from learner.runtime.train_step import OptimizerConfig, create_train_state, make_optimizer


def local_devices_of(devices: Sequence[jax.Device]) -> list[jax.Device]:
    """Those of `devices` this process drives (all of them in a one-process run)."""
    return [d for d in devices if d.process_index == jax.process_index()]


def _peak_gb(devices: Sequence[jax.Device] | None = None) -> float | None:
    """The largest peak of memory in use over this process's `devices` (default: its first one)."""
    peaks = [p for p in peak_gb_per_device(local_devices_of(devices or jax.local_devices()[:1])) if p is not None]
    return max(peaks) if peaks else None


def peak_gb_per_device(devices: Sequence[jax.Device]) -> list[float | None]:
    """Each device's peak memory in use since the process started, in GB (None where the backend
    keeps no statistics, as on the CPU)."""
    out: list[float | None] = []
    for d in devices:
        try:
            stats = d.memory_stats() or {}
        except Exception:  # noqa: BLE001 - backends without memory stats
            stats = {}
        peak = stats.get("peak_bytes_in_use")
        out.append(None if peak is None else peak / 1e9)
    return out


def _batch(prompts: np.ndarray, group: int, tokens: np.ndarray, logprobs: np.ndarray,
           rng: np.random.Generator) -> dict[str, np.ndarray]:
    rows, new = tokens.shape
    p = prompts.shape[1]
    full = np.concatenate([np.repeat(prompts, group, axis=0), tokens], axis=1).astype(np.int32)
    mask = np.zeros(full.shape, np.float32)
    mask[:, p:] = 1.0
    old = np.zeros(full.shape, np.float32)
    old[:, p:] = logprobs
    return {"tokens": full, "loss_mask": mask, "old_logprobs": old,
            "advantages": rng.standard_normal(rows).astype(np.float32)}


def timed_rl_step(state: Any, ref: Any, sampler: Sampler, distinct: np.ndarray, group: int, sc: SamplingConfig,
                  key: jax.Array, loss_fn: Any, micro_batch_tokens: int, rng: np.random.Generator,
                  rows_per_generate: int | None = None) -> tuple[Any, dict[str, Any]]:
    """One GRPO step on `distinct` prompts x `group` samples, timed by phase: the rollout (in calls
    of `rows_per_generate` rows, default all), the reference log-probs, the micro-batched update
    with the rollout copy's refresh. Returns the new state and the timings. Across processes
    (`jax.distributed`) every process passes the same arguments: each samples its share of the rows
    and gets every process's completions back, as `learner train` does."""
    rows = [list(r) for r in np.repeat(distinct, group, axis=0)]
    per_call = rows_per_generate or len(rows)
    t0 = time.perf_counter()
    results = [generate_rows(sampler, rows[s:s + per_call], sc, jax.random.fold_in(key, s), group)
               for s in range(0, len(rows), per_call)]
    t1 = time.perf_counter()
    batch = _batch(distinct, group, np.concatenate([r.tokens for r in results]),
                   np.concatenate([r.logprobs for r in results]), rng)
    batch["ref_logprobs"] = batch_reference_logprobs(state, ref, batch, micro_batch_tokens)
    t2 = time.perf_counter()
    state, metrics = step(state, batch, loss_fn, micro_batch_tokens)
    sampler.update_params(state.params)
    jax.block_until_ready((metrics, sampler.params))
    t3 = time.perf_counter()
    return state, dict(rollout_s=t1 - t0, reference_s=t2 - t1, update_s=t3 - t2, step_s=t3 - t0,
                       new_tokens=int(sum(r.lengths.sum() for r in results)), loss=float(metrics["loss"]))


def bench_rl_step(cfg: ModelConfig, *, prompts: int, group: int, prompt_len: int, max_new: int,
                  micro_batch_tokens: int, steps: int = 2, seed: int = 0,
                  devices: Sequence[jax.Device] | None = None, steps_per_check: int = 1,
                  tensor: int = 1) -> dict[str, Any]:
    """`devices`: the mesh's devices (default: all), on the fsdp axis but for `tensor` of them
    (the tensor axis: weights, and with them the rollout copy's reads, split that many ways);
    `steps_per_check`: the sampler's decode steps per check of its loop condition
    (`sampling.steps_per_check`)."""
    mesh = make_mesh(MeshConfig(data=1, fsdp=-1, tensor=tensor), devices)
    model = create_sharded_model(lambda: Transformer(cfg, rngs=nnx.Rngs(seed)), mesh)
    tx = make_optimizer(OptimizerConfig(learning_rate=1e-6, grad_clip_norm=1.0))
    state = create_train_state(model, tx, mesh=mesh)
    del model
    ref = reference_copy(state.params, jnp.dtype(cfg.jnp_compute_dtype).name)
    sampler = Sampler(state.model, mesh=mesh, min_bucket=64, steps_per_check=steps_per_check)
    loss_fn = make_grpo_loss(GRPOConfig(kl_coef=0.04))
    rng = np.random.default_rng(seed)
    sc = SamplingConfig(max_new_tokens=max_new, temperature=1.0)
    runs = []
    for i in range(steps):
        distinct = rng.integers(0, cfg.vocab_size, (prompts, prompt_len)).astype(np.int32)
        state, run = timed_rl_step(state, ref, sampler, distinct, group, sc, jax.random.PRNGKey(i), loss_fn,
                                   micro_batch_tokens, rng)
        runs.append(run)
    last = runs[-1]
    return dict(
        prompts=prompts, group=group, prompt_len=prompt_len, max_new=max_new,
        micro_batch_tokens=micro_batch_tokens, steps_per_check=steps_per_check, mesh=dict(mesh.shape),
        micro_batches=micro_batches_for({"tokens": np.zeros((prompts * group, prompt_len + max_new))},
                                        mesh, micro_batch_tokens),
        rollout_tokens_per_s=last["new_tokens"] / last["rollout_s"],
        devices=mesh.size, peak_mem_gb=_peak_gb(list(mesh.devices.flat)), first_step_s=runs[0]["step_s"], **last,
    )
