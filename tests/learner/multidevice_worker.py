"""Subprocess run with 8 simulated CPU devices (XLA_FLAGS set by the parent test).

1. loss + grads of a sharded model on a (data=2, fsdp=2, tensor=2) mesh == single-device ones;
2. a train state checkpointed on a (1, 8, 1) mesh restores onto the (2, 2, 2) mesh.
Prints "OK" at the end; any mismatch raises.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from tiny_setup import TINY_CFG, flat_params, tiny_batch  # noqa: E402

from learner.lm.model import Transformer  # noqa: E402
from learner.lm.sharding import (  # noqa: E402
    MeshConfig,
    batch_sharding,
    create_sharded_model,
    init_placement,
    make_mesh,
    shard_model,
)
from learner.runtime.checkpoint import Checkpointer  # noqa: E402
from learner.runtime.losses import lm_loss_sum_count  # noqa: E402
from learner.runtime.train_step import (  # noqa: E402
    OptimizerConfig,
    create_train_state,
    grads_and_loss,
    make_optimizer,
    train_step,
)

LR = 1e-3


def main() -> None:
    ckpt_dir = sys.argv[1]
    assert jax.device_count() == 8, jax.devices()
    tx = make_optimizer(OptimizerConfig(learning_rate=LR))
    batch = tiny_batch(0)

    single = create_train_state(Transformer(TINY_CFG, rngs=nnx.Rngs(0)), tx)
    loss1, grads1 = jax.jit(grads_and_loss, static_argnums=2)(single, batch, lm_loss_sum_count)

    mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
    model = shard_model(Transformer(TINY_CFG, rngs=nnx.Rngs(0)), mesh)
    q = model.layers[0].self_attn.q_proj.kernel[...]
    assert q.sharding.spec == P("fsdp", "tensor"), q.sharding
    assert len({str(s.index) for s in q.addressable_shards}) == 4
    sharded = create_train_state(model, tx, mesh=mesh)
    sbatch = jax.device_put(batch, batch_sharding(mesh))
    loss8, grads8 = jax.jit(grads_and_loss, static_argnums=2)(sharded, sbatch, lm_loss_sum_count)
    np.testing.assert_allclose(float(loss8), float(loss1), rtol=1e-6)
    g1, g8 = flat_params(grads1), flat_params(grads8)
    for k in g1:
        np.testing.assert_allclose(g8[k], g1[k], rtol=1e-4, atol=1e-6, err_msg=k)
    print(f"loss single={float(loss1):.6f} sharded={float(loss8):.6f}", flush=True)

    # A full optimizer step keeps the partitioning and matches the single-device step.
    single, _ = train_step(single, batch, lm_loss_sum_count)
    sharded, _ = train_step(sharded, sbatch, lm_loss_sum_count)
    assert sharded.params["layers"][0]["self_attn"]["q_proj"]["kernel"].sharding.spec == P("fsdp", "tensor")
    p1, p8 = flat_params(single.params), flat_params(sharded.params)
    # Adam's first step moves each parameter by about lr * sign(g). Where a gradient is within the
    # summation-order noise of zero (the gradients above agree to atol 1e-6), the two reductions may
    # give it opposite signs, and that parameter then moves by lr either way: it is held to 2 lr.
    # Everywhere else the step is the same.
    for k in p1:
        settled = np.abs(g1[k]) > 1e-5
        np.testing.assert_allclose(p8[k][settled], p1[k][settled], rtol=1e-4, atol=2e-5, err_msg=k)
        assert np.all(np.abs(p8[k] - p1[k]) <= 2 * LR + 2e-5), k

    # Checkpoint on a (1, 8, 1) mesh, restore onto the (2, 2, 2) mesh.
    mesh_a = make_mesh(MeshConfig(data=1, fsdp=8, tensor=1))
    model_a = create_sharded_model(lambda: Transformer(TINY_CFG, rngs=nnx.Rngs(1)), mesh_a)
    state_a = create_train_state(model_a, tx, mesh=mesh_a)
    state_a, _ = train_step(state_a, jax.device_put(batch, batch_sharding(mesh_a)), lm_loss_sum_count)
    with Checkpointer(ckpt_dir) as ck:
        ck.save(state_a, force=True)
    template = create_train_state(shard_model(Transformer(TINY_CFG, rngs=nnx.Rngs(2)), mesh), tx, mesh=mesh)
    with Checkpointer(ckpt_dir) as ck:
        restored = ck.restore(template)
    assert int(restored.step) == 1
    kern = restored.params["layers"][1]["mlp"]["gate_proj"]["kernel"]
    assert kern.sharding.mesh.shape == mesh.shape and kern.sharding.spec == P("fsdp", "tensor")
    pa, pr = flat_params(state_a.params), flat_params(restored.params)
    oa, orr = flat_params(state_a.opt_state), flat_params(restored.opt_state)
    for k in pa:
        np.testing.assert_array_equal(pr[k], pa[k], err_msg=k)
    for k in oa:
        np.testing.assert_array_equal(orr[k], oa[k], err_msg=k)
    # The weights built op by op in host memory equal those of one jitted program, shard for shard.
    by = {where: create_sharded_model(lambda: Transformer(TINY_CFG, rngs=nnx.Rngs(3)), mesh_a, placement=where)
          for where in ("host", "jit")}
    assert init_placement(mesh_a, 1 << 20) == "host" and init_placement(mesh_a, 1 << 60) == "jit"
    host_state, jit_state = nnx.state(by["host"], nnx.Param), nnx.state(by["jit"], nnx.Param)
    for (path, a), (_, b) in zip(jax.tree_util.tree_leaves_with_path(host_state),
                                 jax.tree_util.tree_leaves_with_path(jit_state), strict=True):
        assert a.sharding == b.sharding, (path, a.sharding, b.sharding)
        assert len(a.addressable_shards) == 8 and a.sharding.mesh.shape == mesh_a.shape, path
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7, err_msg=str(path))
    kern = host_state["layers"][0]["mlp"]["up_proj"]["kernel"]
    assert kern.sharding.spec == P("fsdp", "tensor") and kern.addressable_shards[0].data.shape[0] == kern.shape[0] // 8
    print("OK", flush=True)


if __name__ == "__main__":
    main()
