"""Tiny random Hugging Face checkpoints built with `transformers` (tests only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

TINY = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
)

FAMILIES: dict[str, dict[str, Any]] = {
    "llama": dict(cls="Llama", kw=dict(rope_theta=10000.0)),
    "llama_tied": dict(cls="Llama", kw=dict(tie_word_embeddings=True, rope_theta=5000.0)),
    "llama3_rope": dict(
        cls="Llama",
        kw=dict(
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        ),
    ),
    "qwen2": dict(cls="Qwen2", kw=dict(rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen3": dict(cls="Qwen3", kw=dict(rope_theta=1000000.0, head_dim=32, tie_word_embeddings=True)),
}


def make_hf_model(family: str, seed: int = 0, **overrides: Any) -> Any:
    spec = FAMILIES[family]
    torch.manual_seed(seed)
    cfg_cls = getattr(transformers, f"{spec['cls']}Config")
    model_cls = getattr(transformers, f"{spec['cls']}ForCausalLM")
    cfg = cfg_cls(**{**TINY, **spec["kw"], **overrides})
    model = model_cls(cfg).eval().float()
    # Default init leaves biases/norm weights trivial; randomise everything so the test bites.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    return model


def save_hf_model_dir(family: str, path: Path, seed: int = 0, **overrides: Any) -> Any:
    model = make_hf_model(family, seed, **overrides)
    model.save_pretrained(str(path))
    return model


def hf_logits(model: Any, tokens: Any) -> Any:
    with torch.no_grad():
        return model(torch.as_tensor(tokens, dtype=torch.long)).logits.float().numpy()
