"""Decoder-only transformer (Llama / Qwen2 / Qwen3 families) in Flax NNX.

Parameter layout (paths in `nnx.state(model)`), chosen so HF names map one to one:

    embed_tokens/embedding                  [V, d]
    layers/{i}/input_layernorm/scale        [d]
    layers/{i}/self_attn/{q,k,v,o}_proj/kernel  [in, out]   (+ /bias when configured)
    layers/{i}/self_attn/{q,k}_norm/scale   [head_dim]       (Qwen3)
    layers/{i}/post_attention_layernorm/scale
    layers/{i}/mlp/{gate,up,down}_proj/kernel   [in, out]
    norm/scale                              [d]
    lm_head/kernel                          [d, V]           (absent when embeddings are tied)

Params are stored in `cfg.param_dtype` and cast to `cfg.compute_dtype` at use; norms, softmax and
logits are computed in float32. Layers run in a Python loop (each optionally rematerialised), and
the decode path keeps one separate [B, K, T, D] cache array per layer for k and for v.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from learner.lm.attention import causal_attention, decode_attention, resolve_attention_impl
from learner.lm.config import ModelConfig
from learner.lm.rope import apply_rope, inverse_frequencies, rope_cos_sin
from learner.lm.sharding import constrain

# One (k, v) pair per layer, each [B, K, T, D] in compute dtype.
KVCache = tuple[tuple[jax.Array, jax.Array], ...]

_INIT_STD = 0.02


def _remat_policy(name: str) -> Callable[..., Any] | None:
    policies: dict[str, Callable[..., Any] | None] = {
        "full": None,
        "dots": jax.checkpoint_policies.dots_saveable,
        "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    }
    if name not in policies:
        raise ValueError(f"unknown remat_policy {name!r}; expected one of {sorted(policies)}")
    return policies[name]


class Dense(nnx.Module):
    def __init__(self, in_f: int, out_f: int, *, bias: bool, cfg: ModelConfig, rngs: nnx.Rngs):
        pdt = cfg.jnp_param_dtype
        init = jax.nn.initializers.normal(_INIT_STD)
        self.kernel = nnx.Param(init(rngs.params(), (in_f, out_f), jnp.float32).astype(pdt))
        self.bias = nnx.Param(jnp.zeros((out_f,), pdt)) if bias else None
        self.cdt = cfg.jnp_compute_dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        y = jnp.dot(x.astype(self.cdt), self.kernel[...].astype(self.cdt))
        if self.bias is not None:
            y = y + self.bias[...].astype(self.cdt)
        return y


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, *, eps: float, cfg: ModelConfig):
        self.scale = nnx.Param(jnp.ones((dim,), cfg.jnp_param_dtype))
        self.eps = eps
        self.cdt = cfg.jnp_compute_dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return (self.scale[...].astype(jnp.float32) * xf).astype(self.cdt)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        d, h, k, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = Dense(d, h * hd, bias=cfg.qkv_bias, cfg=cfg, rngs=rngs)
        self.k_proj = Dense(d, k * hd, bias=cfg.qkv_bias, cfg=cfg, rngs=rngs)
        self.v_proj = Dense(d, k * hd, bias=cfg.qkv_bias, cfg=cfg, rngs=rngs)
        self.o_proj = Dense(h * hd, d, bias=cfg.o_bias, cfg=cfg, rngs=rngs)
        if cfg.qk_norm:
            self.q_norm: RMSNorm | None = RMSNorm(hd, eps=cfg.rms_norm_eps, cfg=cfg)
            self.k_norm: RMSNorm | None = RMSNorm(hd, eps=cfg.rms_norm_eps, cfg=cfg)
        else:
            self.q_norm = None
            self.k_norm = None
        self.num_heads, self.num_kv_heads, self.head_dim = h, k, hd

    def qkv(
        self, x: jax.Array, cos: jax.Array, sin: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        b, s, _ = x.shape
        q = self.q_proj(x).reshape(b, s, self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(b, s, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(b, s, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return constrain(q, "heads"), constrain(k, "heads"), constrain(v, "heads")

    def __call__(
        self,
        x: jax.Array,
        cos: jax.Array,
        sin: jax.Array,
        impl: str,
        key_valid: jax.Array | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        b, s, _ = x.shape
        q, k, v = self.qkv(x, cos, sin)
        out = causal_attention(q, k, v, impl=impl, key_valid=key_valid)  # type: ignore[arg-type]
        return self.o_proj(out.reshape(b, s, -1)), (k, v)

    def decode(
        self,
        x: jax.Array,
        cos: jax.Array,
        sin: jax.Array,
        cache: tuple[jax.Array, jax.Array],
        index: jax.Array,
        key_valid: jax.Array,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """x: [B, 1, d]; writes this token's k/v at cache slot `index` (same for all rows)."""
        b = x.shape[0]
        q, k, v = self.qkv(x, cos, sin)
        k_cache, v_cache = cache
        # [B, 1, K, D] -> [B, K, 1, D]; a one-slot dynamic_update_slice is done in place.
        k_cache = jax.lax.dynamic_update_slice(
            k_cache, k.transpose(0, 2, 1, 3).astype(k_cache.dtype), (0, 0, index, 0)
        )
        v_cache = jax.lax.dynamic_update_slice(
            v_cache, v.transpose(0, 2, 1, 3).astype(v_cache.dtype), (0, 0, index, 0)
        )
        k_cache, v_cache = constrain(k_cache, "cache"), constrain(v_cache, "cache")
        out = decode_attention(q[:, 0], k_cache, v_cache, key_valid)
        return self.o_proj(out.reshape(b, 1, -1)), (k_cache, v_cache)


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Dense(d, f, bias=cfg.mlp_bias, cfg=cfg, rngs=rngs)
        self.up_proj = Dense(d, f, bias=cfg.mlp_bias, cfg=cfg, rngs=rngs)
        self.down_proj = Dense(f, d, bias=cfg.mlp_bias, cfg=cfg, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = constrain(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x), "ffn")
        return constrain(self.down_proj(h), "hidden")


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, cfg=cfg)
        self.self_attn = Attention(cfg, rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, cfg=cfg)
        self.mlp = MLP(cfg, rngs)

    def __call__(
        self,
        x: jax.Array,
        cos: jax.Array,
        sin: jax.Array,
        impl: str,
        key_valid: jax.Array | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        a, kv = self.self_attn(self.input_layernorm(x), cos, sin, impl, key_valid)
        x = constrain(x + a, "hidden")
        return constrain(x + self.mlp(self.post_attention_layernorm(x)), "hidden"), kv

    def decode(
        self,
        x: jax.Array,
        cos: jax.Array,
        sin: jax.Array,
        cache: tuple[jax.Array, jax.Array],
        index: jax.Array,
        key_valid: jax.Array,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        a, cache = self.self_attn.decode(
            self.input_layernorm(x), cos, sin, cache, index, key_valid
        )
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), cache


class Transformer(nnx.Module):
    """Causal LM. `__call__(tokens) -> float32 logits [B, S, V]`."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        init = jax.nn.initializers.normal(_INIT_STD)
        self.embed_tokens = nnx.Module()
        self.embed_tokens.embedding = nnx.Param(
            init(rngs.params(), (cfg.vocab_size, cfg.hidden_size), jnp.float32).astype(
                cfg.jnp_param_dtype
            )
        )
        self.layers = nnx.List([DecoderLayer(cfg, rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, cfg=cfg)
        if cfg.tie_word_embeddings:
            self.lm_head: Dense | None = None
        else:
            self.lm_head = Dense(cfg.hidden_size, cfg.vocab_size, bias=False, cfg=cfg, rngs=rngs)
        self.inv_freq = nnx.static(tuple(float(f) for f in inverse_frequencies(cfg.rope, cfg.head_dim)))

    # ------------------------------------------------------------------ pieces
    @property
    def attention_impl(self) -> str:
        return resolve_attention_impl(
            self.cfg.attention_impl, self.cfg.jnp_compute_dtype, self.cfg.head_dim
        )

    def embed(self, tokens: jax.Array) -> jax.Array:
        table = self.embed_tokens.embedding[...]
        return jnp.take(table, tokens, axis=0).astype(self.cfg.jnp_compute_dtype)

    def rope_tables(self, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
        import numpy as np

        return rope_cos_sin(
            positions, np.asarray(self.inv_freq, np.float32), self.cfg.jnp_compute_dtype
        )

    def head_weight(self) -> tuple[jax.Array, str]:
        """The LM-head parameter as stored and its layout: ("vd", [V, d]) tied, ("dv", [d, V]) not."""
        if self.lm_head is None:
            return self.embed_tokens.embedding[...], "vd"
        return self.lm_head.kernel[...], "dv"

    def logits(self, hidden: jax.Array) -> jax.Array:
        """Final-normed hidden states [..., d] -> float32 logits [..., V]."""
        cdt = self.cfg.jnp_compute_dtype
        if self.lm_head is None:
            w = self.embed_tokens.embedding[...].astype(cdt)
            return jnp.einsum("...d,vd->...v", hidden.astype(cdt), w,
                              preferred_element_type=jnp.float32)
        w = self.lm_head.kernel[...].astype(cdt)
        return jnp.einsum("...d,dv->...v", hidden.astype(cdt), w,
                          preferred_element_type=jnp.float32)

    # ------------------------------------------------------------------ full sequence
    def hidden_states(
        self,
        tokens: jax.Array,
        positions: jax.Array | None = None,
        key_valid: jax.Array | None = None,
        collect_kv: bool = False,
    ) -> tuple[jax.Array, list[tuple[jax.Array, jax.Array]]]:
        """Final-normed hidden states [B, S, d] (and per-layer k/v [B, S, K, D] if asked)."""
        b, s = tokens.shape
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
        cos, sin = self.rope_tables(positions)
        impl = self.attention_impl
        x = constrain(self.embed(tokens), "hidden")
        kvs: list[tuple[jax.Array, jax.Array]] = []
        for layer in self.layers:
            if self.cfg.remat:
                graphdef, state = nnx.split(layer)

                def run(state: Any, x: jax.Array, cos: jax.Array, sin: jax.Array,
                        kvalid: Any, graphdef: Any = graphdef) -> Any:
                    return nnx.merge(graphdef, state)(x, cos, sin, impl, kvalid)

                fn = jax.checkpoint(run, policy=_remat_policy(self.cfg.remat_policy))
                x, kv = fn(state, x, cos, sin, key_valid)
            else:
                x, kv = layer(x, cos, sin, impl, key_valid)
            if collect_kv:
                kvs.append(kv)
        return constrain(self.norm(x), "hidden"), kvs

    def __call__(self, tokens: jax.Array, positions: jax.Array | None = None) -> jax.Array:
        hidden, _ = self.hidden_states(tokens, positions)
        return self.logits(hidden)

    # ------------------------------------------------------------------ generation
    def prefill(
        self, tokens: jax.Array, positions: jax.Array, key_valid: jax.Array, cache_len: int
    ) -> tuple[jax.Array, KVCache]:
        """Run a (left-padded) prompt [B, P]; returns hidden [B, P, d] and caches of length T."""
        b, p = tokens.shape
        if cache_len < p:
            raise ValueError(f"cache_len {cache_len} < prompt length {p}")
        hidden, kvs = self.hidden_states(tokens, positions, key_valid, collect_kv=True)
        return hidden, self.cache_from_kv(kvs, cache_len)

    def cache_from_kv(self, kvs: Sequence[tuple[jax.Array, jax.Array]], cache_len: int) -> KVCache:
        """Per-layer k/v [B, P, K, D] of a prompt -> caches [B, K, T, D] with it in slots 0..P-1."""
        cdt = self.cfg.jnp_compute_dtype
        cache = []
        for k, v in kvs:
            b = k.shape[0]
            shape = (b, self.cfg.num_kv_heads, cache_len, self.cfg.head_dim)
            kc = jax.lax.dynamic_update_slice(
                jnp.zeros(shape, cdt), k.transpose(0, 2, 1, 3).astype(cdt), (0, 0, 0, 0)
            )
            vc = jax.lax.dynamic_update_slice(
                jnp.zeros(shape, cdt), v.transpose(0, 2, 1, 3).astype(cdt), (0, 0, 0, 0)
            )
            cache.append((constrain(kc, "cache"), constrain(vc, "cache")))
        return tuple(cache)

    def decode_step(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        cache: KVCache,
        index: jax.Array,
        key_valid: jax.Array,
    ) -> tuple[jax.Array, KVCache]:
        """tokens/positions [B]; writes slot `index`; key_valid [B, T] must include `index`.

        Returns float32 logits [B, V] and the updated caches.
        """
        cos, sin = self.rope_tables(positions[:, None])
        x = constrain(self.embed(tokens[:, None]), "hidden")
        new_cache = []
        for layer, layer_cache in zip(self.layers, cache, strict=True):
            x, layer_cache = layer.decode(x, cos, sin, layer_cache, index, key_valid)
            new_cache.append(layer_cache)
        return self.logits(self.norm(x)[:, 0]), tuple(new_cache)


def init_cache(cfg: ModelConfig, batch: int, cache_len: int) -> KVCache:
    shape = (batch, cfg.num_kv_heads, cache_len, cfg.head_dim)
    cdt = cfg.jnp_compute_dtype
    return tuple((jnp.zeros(shape, cdt), jnp.zeros(shape, cdt)) for _ in range(cfg.num_layers))
