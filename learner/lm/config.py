"""`ModelConfig`: the decoder-only transformer description, built from a Hugging Face config.json.

Covers the Llama, Qwen2/Qwen2.5 and Qwen3 families. Fields that only matter for running the
model in JAX (dtypes, attention implementation, gradient checkpointing) are added on top of the
HF fields and are not written back to config.json.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Literal

import jax.numpy as jnp

log = logging.getLogger(__name__)

AttentionImpl = Literal["auto", "cudnn", "xla"]
RematPolicy = Literal["full", "dots", "dots_no_batch"]  # learner.lm.model._remat_policy

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")

_DTYPES = {
    "float32": jnp.float32,
    "fp32": jnp.float32,
    "bfloat16": jnp.bfloat16,
    "bf16": jnp.bfloat16,
    "float16": jnp.float16,
    "fp16": jnp.float16,
}


class UnsupportedConfigError(ValueError):
    """The HF config describes an architecture feature this implementation does not cover."""


def dtype_from_name(name: str | Any) -> Any:
    """Map 'bfloat16'/'bf16'/'float32'/... (or a dtype) to a jnp dtype."""
    if not isinstance(name, str):
        return jnp.dtype(name)
    try:
        return _DTYPES[name.lower()]
    except KeyError as e:
        raise ValueError(f"unknown dtype name {name!r}; expected one of {sorted(_DTYPES)}") from e


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding parameters (HF `rope_parameters` / legacy `rope_theta` + `rope_scaling`)."""

    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def to_hf(self) -> dict[str, Any]:
        d: dict[str, Any] = {"rope_type": self.rope_type, "rope_theta": self.theta}
        if self.rope_type == "linear":
            d["factor"] = self.factor
        elif self.rope_type == "llama3":
            d.update(
                factor=self.factor,
                low_freq_factor=self.low_freq_factor,
                high_freq_factor=self.high_freq_factor,
                original_max_position_embeddings=self.original_max_position_embeddings,
            )
        return d


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture + numerics of a Llama/Qwen2/Qwen3-style decoder."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    model_type: str = "llama"
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = dataclasses.field(default_factory=RopeConfig)
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    # JAX-side knobs (not part of config.json)
    param_dtype: str = "float32"
    compute_dtype: str = "bfloat16"
    attention_impl: AttentionImpl = "auto"
    remat: bool = False
    remat_policy: RematPolicy = "full"
    # Extra HF keys we do not interpret, preserved for save round trips.
    extra_hf: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise UnsupportedConfigError(
                f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
            )
        if self.head_dim % 2:
            raise UnsupportedConfigError(f"head_dim={self.head_dim} must be even for rotary")
        if self.rope.rope_type not in SUPPORTED_ROPE_TYPES:
            raise UnsupportedConfigError(
                f"rope type {self.rope.rope_type!r} not supported (have {SUPPORTED_ROPE_TYPES})"
            )
        if self.attention_impl not in ("auto", "cudnn", "xla"):
            raise ValueError(f"attention_impl must be auto|cudnn|xla, got {self.attention_impl!r}")
        dtype_from_name(self.param_dtype)
        dtype_from_name(self.compute_dtype)

    @property
    def jnp_param_dtype(self) -> Any:
        return dtype_from_name(self.param_dtype)

    @property
    def jnp_compute_dtype(self) -> Any:
        return dtype_from_name(self.compute_dtype)

    @property
    def num_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    def replace(self, **kw: Any) -> ModelConfig:
        return dataclasses.replace(self, **kw)

    # ----------------------------------------------------------------- parameter counting
    def matmul_params_per_layer(self) -> int:
        d, h, kv, hd, f = (
            self.hidden_size,
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.intermediate_size,
        )
        return d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f

    def num_params(self) -> int:
        """Total parameter count (embedding counted once when tied)."""
        d, hd = self.hidden_size, self.head_dim
        per_layer = self.matmul_params_per_layer() + 2 * d
        if self.qkv_bias:
            per_layer += (self.num_heads + 2 * self.num_kv_heads) * hd
        if self.o_bias:
            per_layer += d
        if self.qk_norm:
            per_layer += 2 * hd
        embed = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * per_layer + embed + d

    def num_matmul_params(self) -> int:
        """Parameters that take part in a matmul per token (layers + LM head; not the lookup)."""
        return self.num_layers * self.matmul_params_per_layer() + self.vocab_size * self.hidden_size

    # ----------------------------------------------------------------- HF conversion
    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], **overrides: Any) -> ModelConfig:
        model_type = hf.get("model_type", "llama")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedConfigError(
                f"model_type {model_type!r} not supported (have {SUPPORTED_MODEL_TYPES})"
            )
        if hf.get("hidden_act", "silu") != "silu":
            raise UnsupportedConfigError(f"hidden_act {hf.get('hidden_act')!r} (need silu)")
        if hf.get("use_sliding_window", False):
            raise UnsupportedConfigError("sliding-window attention is not supported")
        hidden = int(hf["hidden_size"])
        heads = int(hf["num_attention_heads"])
        head_dim = hf.get("head_dim") or hidden // heads
        attention_bias = bool(hf.get("attention_bias", False))
        if model_type == "qwen2":
            qkv_bias, o_bias = True, False
        else:
            qkv_bias, o_bias = attention_bias, attention_bias
        known = {
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "model_type",
            "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
            "max_position_embeddings", "tie_word_embeddings", "attention_bias", "mlp_bias",
            "bos_token_id", "eos_token_id", "pad_token_id", "hidden_act", "torch_dtype", "dtype",
            "architectures", "transformers_version",
        }  # fmt: skip
        kw: dict[str, Any] = dict(
            vocab_size=int(hf["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(hf["intermediate_size"]),
            num_layers=int(hf["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or heads),
            head_dim=int(head_dim),
            model_type=model_type,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            rope=_rope_from_hf(hf),
            max_position_embeddings=int(hf.get("max_position_embeddings", 4096)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            mlp_bias=bool(hf.get("mlp_bias", False)),
            qk_norm=model_type == "qwen3",
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=hf.get("eos_token_id"),
            pad_token_id=hf.get("pad_token_id"),
            extra_hf={k: v for k, v in hf.items() if k not in known},
        )
        kw.update(overrides)
        return cls(**kw)

    @classmethod
    def from_hf_dir(cls, path: str | Path, **overrides: Any) -> ModelConfig:
        cfg_path = Path(path) / "config.json"
        if not cfg_path.is_file():
            raise FileNotFoundError(f"no config.json in {path}")
        return cls.from_hf_dict(json.loads(cfg_path.read_text()), **overrides)

    def to_hf_dict(self) -> dict[str, Any]:
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
        d: dict[str, Any] = dict(self.extra_hf)
        d.update(
            architectures=[arch[self.model_type]],
            model_type=self.model_type,
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            hidden_act="silu",
            rms_norm_eps=self.rms_norm_eps,
            max_position_embeddings=self.max_position_embeddings,
            tie_word_embeddings=self.tie_word_embeddings,
            rope_theta=self.rope.theta,
            rope_parameters=self.rope.to_hf(),
            bos_token_id=self.bos_token_id,
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            torch_dtype="bfloat16" if self.param_dtype in ("bfloat16", "bf16") else "float32",
        )
        if self.rope.rope_type != "default":
            d["rope_scaling"] = self.rope.to_hf()
        if self.model_type != "qwen2":
            d["attention_bias"] = self.qkv_bias
        if self.model_type == "llama":
            d["mlp_bias"] = self.mlp_bias
        return d


def _rope_from_hf(hf: dict[str, Any]) -> RopeConfig:
    params = hf.get("rope_parameters") or {}
    legacy = hf.get("rope_scaling") or {}
    merged: dict[str, Any] = {**legacy, **params}
    theta = merged.get("rope_theta", hf.get("rope_theta", 10000.0))
    rope_type = merged.get("rope_type", merged.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise UnsupportedConfigError(
            f"rope type {rope_type!r} not supported (have {SUPPORTED_ROPE_TYPES})"
        )
    return RopeConfig(
        theta=float(theta),
        rope_type=rope_type,
        factor=float(merged.get("factor", 1.0)),
        low_freq_factor=float(merged.get("low_freq_factor", 1.0)),
        high_freq_factor=float(merged.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(
            merged.get("original_max_position_embeddings", hf.get("max_position_embeddings", 4096))
        ),
    )
