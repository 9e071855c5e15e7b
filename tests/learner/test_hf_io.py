"""HF safetensors load/save: round trips (single file, sharded, bf16) and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest
import torch
from hf_fixtures import hf_logits, save_hf_model_dir
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
from tiny_setup import flat_params
from transformers import AutoModelForCausalLM

from learner.lm.config import ModelConfig, UnsupportedConfigError
from learner.lm.hf_io import INDEX_FILE, CheckpointMismatchError, load_hf_model, save_hf_model
from learner.lm.sharding import MeshConfig, make_mesh


def _logits(model, tokens) -> np.ndarray:
    return np.asarray(jax.jit(lambda m, t: m(t))(model, tokens))


def test_save_sharded_round_trip_and_transformers_reads_it(tmp_path: Path) -> None:
    hf = save_hf_model_dir("qwen2", tmp_path / "src")
    model = load_hf_model(tmp_path / "src", compute_dtype="float32")
    files = save_hf_model(model, tmp_path / "out", max_shard_bytes=60_000)
    assert len(files) > 1 and (tmp_path / "out" / INDEX_FILE).is_file()
    index = json.loads((tmp_path / "out" / INDEX_FILE).read_text())
    assert set(index["weight_map"].values()) == {f.name for f in files}
    # Our loader reads the sharded copy back identically ...
    again = load_hf_model(tmp_path / "out", compute_dtype="float32")
    a, b = flat_params(jax.tree.leaves(model)), flat_params(jax.tree.leaves(again))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    # ... and transformers loads it and produces the same logits as the original.
    reloaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"), dtype=torch.float32)
    tokens = np.random.default_rng(0).integers(0, 97, size=(1, 16))
    np.testing.assert_allclose(hf_logits(reloaded, tokens), hf_logits(hf, tokens), atol=1e-6)


def test_bf16_checkpoint_loads_into_bf16_params(tmp_path: Path) -> None:
    hf = save_hf_model_dir("qwen3", tmp_path / "f32")
    hf.to(torch.bfloat16).save_pretrained(str(tmp_path / "bf16"))
    with safe_open(str(tmp_path / "bf16" / "model.safetensors"), framework="numpy") as f:
        assert f.get_slice("model.norm.weight").get_dtype() == "BF16"
    model = load_hf_model(tmp_path / "bf16", param_dtype="bfloat16", compute_dtype="float32")
    k = model.layers[0].self_attn.q_proj.kernel[...]
    assert k.dtype == ml_dtypes.bfloat16
    ref = hf.state_dict()["model.layers.0.self_attn.q_proj.weight"].to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(np.asarray(k, np.float32), ref.T)
    save_hf_model(model, tmp_path / "bf16_out")
    cfg = json.loads((tmp_path / "bf16_out" / "config.json").read_text())
    assert cfg["torch_dtype"] == "bfloat16" and cfg["model_type"] == "qwen3"
    out = load_file(str(tmp_path / "bf16_out" / "model.safetensors"))
    assert out["model.layers.0.self_attn.q_proj.weight"].dtype == ml_dtypes.bfloat16
    assert "lm_head.weight" not in out  # tied


def test_load_onto_mesh_matches_single_device(tmp_path: Path) -> None:
    save_hf_model_dir("llama", tmp_path)
    mesh = make_mesh(MeshConfig())
    sharded = load_hf_model(tmp_path, mesh=mesh, compute_dtype="float32")
    plain = load_hf_model(tmp_path, compute_dtype="float32")
    tokens = np.arange(20).reshape(2, 10) % 97
    np.testing.assert_array_equal(_logits(sharded, tokens), _logits(plain, tokens))
    assert sharded.layers[0].mlp.up_proj.kernel[...].sharding.mesh.shape == mesh.shape


def test_shape_mismatch_names_the_tensor(tmp_path: Path) -> None:
    save_hf_model_dir("llama", tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["intermediate_size"] = 100
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointMismatchError, match=r"model\.layers\.0\.mlp\.(gate|up|down)_proj\.weight"):
        load_hf_model(tmp_path)


def test_missing_and_unexpected_tensors(tmp_path: Path) -> None:
    save_hf_model_dir("llama", tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    removed = dict(tensors)
    del removed["model.layers.1.self_attn.k_proj.weight"]
    save_file(removed, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointMismatchError, match=r"model\.layers\.1\.self_attn\.k_proj\.weight.*missing"):
        load_hf_model(tmp_path)
    extra = dict(tensors)
    extra["model.layers.9.mlp.up_proj.weight"] = np.zeros((2, 2), np.float32)
    save_file(extra, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointMismatchError, match="does not use"):
        load_hf_model(tmp_path)


def test_unsupported_configs_are_rejected() -> None:
    base = dict(vocab_size=10, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2)  # fmt: skip
    with pytest.raises(UnsupportedConfigError, match="model_type"):
        ModelConfig.from_hf_dict({**base, "model_type": "gpt2"})
    with pytest.raises(UnsupportedConfigError, match="yarn"):
        ModelConfig.from_hf_dict({**base, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    cfg = ModelConfig.from_hf_dict({**base, "model_type": "qwen2"})
    assert ModelConfig.from_hf_dict(cfg.to_hf_dict()) == cfg
