"""Logit parity against `transformers` on tiny random checkpoints of every supported family."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hf_fixtures import FAMILIES, hf_logits, save_hf_model_dir

from learner.lm.hf_io import load_hf_model


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_match_transformers(family: str, tmp_path) -> None:
    hf = save_hf_model_dir(family, tmp_path)
    model = load_hf_model(tmp_path, param_dtype="float32", compute_dtype="float32")
    assert model.cfg.model_type == hf.config.model_type
    assert (model.lm_head is None) == bool(hf.config.tie_word_embeddings)
    tokens = np.random.default_rng(1).integers(0, model.cfg.vocab_size, size=(2, 40))
    ours = np.asarray(jax.jit(lambda m, t: m(t))(model, tokens))
    ref = hf_logits(hf, tokens)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)


def test_family_features_are_detected(tmp_path) -> None:
    save_hf_model_dir("qwen2", tmp_path / "q2")
    save_hf_model_dir("qwen3", tmp_path / "q3")
    save_hf_model_dir("llama3_rope", tmp_path / "l3")
    q2 = load_hf_model(tmp_path / "q2", compute_dtype="float32").cfg
    q3 = load_hf_model(tmp_path / "q3", compute_dtype="float32").cfg
    l3 = load_hf_model(tmp_path / "l3", compute_dtype="float32").cfg
    assert q2.qkv_bias and not q2.o_bias and not q2.qk_norm
    assert q3.qk_norm and q3.head_dim == 32 and q3.tie_word_embeddings
    assert l3.rope.rope_type == "llama3" and l3.rope.factor == 8.0
