"""What stays on the devices across stages: the initial weights are handed to the first stage (no
kept copy), checkpoint restores fill abstract templates, and RL keeps its reference only in the
reference dtype. Counted with jax.live_arrays() on the CPU, by the embedding's shape and dtype."""

from __future__ import annotations

import gc

import jax
import numpy as np
import pytest

from configs import demo
from learner.runtime.checkpoint import Checkpointer
from learner.runtime.policy import PolicyReleasedError
from learner.runtime.scale import step as scale_step
from learner.stages.run import open_run
from learner.stages.state import stage_state, template


def _live(shape: tuple[int, ...], dtype: str) -> int:
    gc.collect()
    return sum(1 for a in jax.live_arrays() if a.shape == shape and a.dtype == np.dtype(dtype) and not a.is_deleted())


@pytest.fixture()
def run(tmp_path):
    cfg = demo.get_config()
    cfg.workdir = str(tmp_path / "run")
    cfg.stages = "sft,rl"
    cfg.model.vocab_size = 300
    cfg.model.hidden_size = 48  # a width nothing else has, so the embedding's shape is its own
    cfg.model.intermediate_size = 64
    cfg.model.num_layers = 1
    cfg.model.compute_dtype = "bfloat16"  # the reference copy is bf16: float32 arrays are the state's
    cfg.rl.grpo.kl_coef = 0.04
    r = open_run(cfg)
    yield r
    r.close()


def test_stages_keep_no_copy_of_the_weights_beyond_their_state(run) -> None:
    vocab, d = run.policy.model_config.vocab_size, run.policy.model_config.hidden_size
    emb = (vocab, d)
    assert _live(emb, "float32") == 1  # the initial policy, before any stage
    stages = ["sft", "rl"]

    state, reference, restored = stage_state(run, "sft", stages)
    run.policy.release()
    assert reference is None and restored == 0
    assert not run.policy.holds_weights
    with pytest.raises(PolicyReleasedError):
        run.policy.model  # noqa: B018 - the property raises
    # params + AdamW mu and nu; no kept initial policy, no copy of the starting params
    assert _live(emb, "float32") == 3
    with Checkpointer(run.workdir / "ckpt" / "sft", async_save=False) as ck:
        ck.save(state, force=True)
    del state
    assert _live(emb, "float32") == 0

    state, reference, restored = stage_state(run, "rl", stages)
    assert restored == 0
    # RL's state from the SFT checkpoint (abstract template: nothing extra), its reference in bf16
    assert _live(emb, "float32") == 3
    assert _live(emb, "bfloat16") == 1
    ref_leaves = {id(x) for x in jax.tree.leaves(reference)}
    assert not ref_leaves & {id(x) for x in jax.tree.leaves(state.params)}
    # A step donates the state's buffers; the reference (fresh buffers, even for leaves kept in
    # their own dtype) stays valid.
    rng = np.random.default_rng(0)
    batch = {"tokens": rng.integers(0, vocab, (2, 16)).astype(np.int32), "loss_mask": np.ones((2, 16), np.float32)}
    from learner.runtime.losses import lm_loss_sum_count

    state, _ = scale_step(state, batch, lm_loss_sum_count)
    assert all(not x.is_deleted() for x in jax.tree.leaves(reference))
    with Checkpointer(run.workdir / "ckpt" / "rl", async_save=False) as ck:
        ck.save(state, force=True)
    del state, reference

    # Resuming RL restores into an abstract template; the reference comes from SFT's final params.
    state, reference, restored = stage_state(run, "rl", stages)
    assert restored == 1
    assert _live(emb, "float32") == 3 and _live(emb, "bfloat16") == 1


def test_abstract_template_has_the_state_shapes_and_no_arrays(run) -> None:
    tpl = template(run, "sft")
    leaves = jax.tree.leaves(tpl.checkpoint_items())
    assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
    assert all(x.sharding is not None for x in leaves)
    state, _, _ = stage_state(run, "sft", ["sft"])
    real = jax.tree.leaves(state.checkpoint_items())
    assert [(x.shape, x.dtype) for x in leaves] == [(x.shape, x.dtype) for x in real]
