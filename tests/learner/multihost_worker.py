"""One of two CPU processes of a `jax.distributed` job on loopback (started by test_multihost.py).

Each process has 4 simulated devices; together they form one (data=1, fsdp=8, tensor=1) mesh.
The process starts through `learner.runtime.distributed` from LEARNER_* environment variables, builds
the global batch from its own rows only (`shard_batch` -> make_array_from_process_local_data),
takes two micro-batched training steps and generates greedily from the rollout copy; process 0
writes the losses, a parameter checksum and the generated tokens as JSON to argv[1].
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

import jax  # noqa: E402

from learner.runtime.distributed import (  # noqa: E402
    DistributedConfig,
    is_controller,
    maybe_initialize_distributed,
)


def main() -> None:
    assert maybe_initialize_distributed(DistributedConfig(mode="auto"))
    import numpy as np
    from jax.experimental import multihost_utils
    from scaling_worker import LOSS, _mesh, _state  # noqa: PLC0415 - after distributed init

    from learner.lm.sampler import Sampler, SamplingConfig
    from learner.lm.sharding import shard_batch
    from learner.runtime.train_step import train_step

    assert jax.process_count() == 2 and jax.device_count() == 8 and jax.local_device_count() == 4
    mesh = _mesh(8)
    state = _state(mesh, mh_cfg())
    rows = global_rows()
    me = jax.process_index()
    local = {k: v[me * 8:(me + 1) * 8] for k, v in rows.items()}  # this process's rows only
    batch = shard_batch(local, mesh)
    assert batch["tokens"].shape == rows["tokens"].shape
    losses = []
    for _ in range(2):
        state, m = train_step(state, batch, LOSS, 2)
        losses.append(float(m["loss"]))
    checksum = float(sum(jax.jit(lambda x: (x.astype("float32") ** 2).sum())(p)
                         for p in jax.tree.leaves(state.params)))
    sampler = Sampler(state.model, mesh=mesh)
    prompts = PROMPTS[me * 8:(me + 1) * 8]  # this process's rows
    res = sampler.generate(prompts, SamplingConfig(max_new_tokens=6, temperature=0.0),
                           jax.random.PRNGKey(0))
    toks = multihost_utils.process_allgather(res.tokens).reshape(-1, res.tokens.shape[1])
    if is_controller():
        Path(sys.argv[1]).write_text(json.dumps({"losses": losses, "checksum": checksum,
                                                 "tokens": np.asarray(toks).tolist()}))
    multihost_utils.sync_global_devices("done")
    print("OK", flush=True)


PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13], [14, 15, 16, 17, 18]] * 4


def mh_cfg() -> object:
    from scaling_worker import CFG

    return CFG.replace(compute_dtype="float32")


def global_rows() -> dict[str, object]:
    import numpy as np
    from scaling_worker import CFG, SEQ

    rng = np.random.default_rng(0)
    return {"tokens": rng.integers(0, CFG.vocab_size, (16, SEQ)).astype(np.int32),
            "loss_mask": (rng.random((16, SEQ)) < 0.7).astype(np.float32)}


if __name__ == "__main__":
    main()
