"""Subprocess run with 8 simulated CPU devices (XLA_FLAGS set by the parent test).

`stats`: compiles (never runs) the training step and the sampler's generate for one fixed global
batch on meshes of 1 and 8 devices and prints one JSON line with each executable's per-device
temporary memory and FLOPs (`compiled.memory_analysis()` / `cost_analysis()`), plus the training
step with 2 micro-batches. `equal`: runs `learner.bench.scaling.check_parity` on all 8: two
training steps (2 micro-batches on a (data=2, fsdp=2, tensor=2) mesh against 1 on one device) and
greedy generation, with and without a shared prefill; sharded results must equal single-device ones.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from learner.bench.scaling import check_parity  # noqa: E402
from learner.bench.throughput import tiny_config  # noqa: E402
from learner.lm.model import Transformer  # noqa: E402
from learner.lm.sampler import Sampler, _generate  # noqa: E402
from learner.lm.sharding import MeshConfig, create_sharded_model, make_mesh, shard_batch  # noqa: E402
from learner.runtime.losses import lm_loss_sum_count  # noqa: E402
from learner.runtime.train_step import (  # noqa: E402
    OptimizerConfig,
    create_train_state,
    make_optimizer,
    train_step,
)

CFG = tiny_config(vocab_size=1024, hidden_size=256, intermediate_size=512, num_layers=2,
                  num_heads=8, num_kv_heads=4, head_dim=32)
ROWS, SEQ = 16, 256
DECODE_ROWS, PROMPT, NEW = 64, 256, 32
LOSS = functools.partial(lm_loss_sum_count, chunk_size=128)


def _stats(compiled: jax.stages.Compiled) -> dict[str, float]:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return {"temp": float(compiled.memory_analysis().temp_size_in_bytes), "flops": float(cost["flops"])}


def _mesh(n: int, **axes: int) -> jax.sharding.Mesh:
    return make_mesh(MeshConfig(**(axes or dict(data=1, fsdp=-1, tensor=1))), jax.devices()[:n])


def _state(mesh: jax.sharding.Mesh, cfg: object = CFG) -> object:
    model = create_sharded_model(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    return create_train_state(model, make_optimizer(OptimizerConfig(learning_rate=1e-3)), mesh=mesh)


def _batch(mesh: jax.sharding.Mesh) -> dict[str, jax.Array]:
    rng = np.random.default_rng(0)
    host = {"tokens": rng.integers(0, CFG.vocab_size, (ROWS, SEQ)).astype(np.int32),
            "loss_mask": (rng.random((ROWS, SEQ)) < 0.7).astype(np.float32)}
    return shard_batch(host, mesh)


def compiled_stats(n: int) -> dict[str, dict[str, float]]:
    mesh = _mesh(n)
    state, batch = _state(mesh), _batch(mesh)
    out = {"train": _stats(train_step.lower(state, batch, LOSS, 1).compile()),
           "train_mb2": _stats(train_step.lower(state, batch, LOSS, 2).compile())}
    sampler = Sampler(state.model, mesh=mesh, rollout_dtype="bfloat16")
    prompt = shard_batch({"p": np.ones((DECODE_ROWS, PROMPT), np.int32),
                          "n": np.full((DECODE_ROWS,), PROMPT, np.int32)}, mesh)
    lowered = _generate.lower(
        sampler.graphdef, sampler.params, prompt["p"], prompt["n"], jax.random.PRNGKey(0),
        jnp.array([-1], jnp.int32), jnp.float32(1.0), jnp.float32(1.0), max_new=NEW,
        cache_len=PROMPT + NEW, greedy=True, use_top_p=False, pad_id=0, mesh=mesh, group=1)
    out["decode"] = _stats(lowered.compile())
    return out


def check_equal() -> None:
    """The (data=2, fsdp=2, tensor=2) mesh against one device (learner.bench.scaling.check_parity)."""
    report = check_parity(jax.devices())
    assert report["mesh"] == {"data": 2, "fsdp": -1, "tensor": 2}, report


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    if sys.argv[1] == "stats":
        print("STATS " + json.dumps({"1": compiled_stats(1), "8": compiled_stats(8)}), flush=True)
    else:
        check_equal()
    print("OK", flush=True)


if __name__ == "__main__":
    main()
