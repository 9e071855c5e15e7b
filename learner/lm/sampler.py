"""Batched generation with a KV cache: one jitted prefill + a device-side `lax.while_loop` decode.

* Prompts are left-padded to a bucketed length P, so every row writes its next k/v into the same
  cache slot (P + i); rotary positions are per row (prompt_len + i) and padded slots are masked.
* Cache length T = bucket(P + max_new_tokens); buckets are powers of two (>= `min_bucket`) up to
  `bucket_multiple` (512) and multiples of it above (a 4k prompt + 3k response gets 7168, not
  8192), or a configured list, so a run compiles only a handful of shapes.
* Rollout copy: on a mesh the sampler decodes from its own copy of the weights, cast to
  `rollout_dtype` (bf16) and resharded by `ROLLOUT_RULES` (replicated over the batch axes,
  tensor-parallel on "tensor"), made on device by one jitted call after each update
  (`update_params`). Rows, and with them the KV cache, are split over the batch axes.
* Shared prefill: `generate(..., group=G)` with G copies of each prompt in a row prefills each
  distinct prompt once and repeats its cache G times.
* Per-token log-probabilities returned with the tokens are log softmax(logits)[token] of the
  model at temperature 1.0, before temperature / top-p are applied: exactly the
  log p_theta(token | prefix) the training side (`learner.runtime.losses.token_logprobs`) computes.
* Stops: EOS ids are checked on device (a row stops after emitting one; the loop exits when all
  rows stopped or max_new_tokens is reached). Stop *token sequences* are applied on the host
  after generation: the completion is truncated right after the first match and the rest masked.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from learner.lm.model import Transformer
from learner.lm.sharding import (
    activation_mesh,
    global_max,
    host_local_rows,
    shard_batch,
    tree_shardings,
)

# Decoding layout of the weights: rows are split over the batch axes, so every device needs
# every weight (no FSDP gathers per token); only "tensor" splits them.
ROLLOUT_RULES: tuple[tuple[str, Any], ...] = (
    (r"embed_tokens/embedding$", jax.sharding.PartitionSpec("tensor", None)),
    (r"(q_proj|k_proj|v_proj|gate_proj|up_proj)/kernel$", jax.sharding.PartitionSpec(None, "tensor")),
    (r"(q_proj|k_proj|v_proj|gate_proj|up_proj)/bias$", jax.sharding.PartitionSpec("tensor")),
    (r"(o_proj|down_proj)/kernel$", jax.sharding.PartitionSpec("tensor", None)),
    (r"lm_head/kernel$", jax.sharding.PartitionSpec(None, "tensor")),
    (r".*", jax.sharding.PartitionSpec()),
)

log = logging.getLogger(__name__)


class SamplerError(ValueError):
    """Bad sampling request (empty prompt, no bucket large enough, ...)."""


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int = 256
    temperature: float = 1.0  # 0.0 = greedy
    top_p: float = 1.0
    eos_ids: tuple[int, ...] = ()
    stop_sequences: tuple[tuple[int, ...], ...] = ()


@dataclasses.dataclass
class SampleResult:
    tokens: np.ndarray  # [B, max_new_tokens] int32, pad_id after the end
    logprobs: np.ndarray  # [B, max_new_tokens] float32, log p_theta at T=1; 0 after the end
    lengths: np.ndarray  # [B] valid generated tokens (including the EOS / stop sequence)
    finish_reasons: list[str]  # "eos" | "stop" | "length"

    def completions(self) -> list[list[int]]:
        return [row[:n].tolist() for row, n in zip(self.tokens, self.lengths, strict=True)]


def bucket_length(n: int, buckets: Sequence[int] | None, min_bucket: int = 16,
                  multiple: int = 512) -> int:
    """Smallest configured bucket >= n; without a list, the next power of two >= max(n,
    min_bucket) up to `multiple`, and the next multiple of `multiple` above it."""
    if buckets:
        for b in sorted(buckets):
            if b >= n:
                return b
        raise SamplerError(f"length {n} exceeds the largest bucket {max(buckets)}")
    pow2 = max(min_bucket, 1 << max(0, (n - 1).bit_length()))
    if multiple > 0 and pow2 > multiple:
        return -(-n // multiple) * multiple
    return pow2


def _cast_matrices(tree: Any, dtype: Any) -> Any:
    """Cast float weight matrices (ndim >= 2) to `dtype`; norms' scales and biases keep theirs.

    With `dtype` = the model's compute dtype this changes no result: every matmul casts its
    weight to the compute dtype anyway, so the rollout copy computes what the trainer computes.
    """

    def one(x: jax.Array) -> jax.Array:
        return x.astype(dtype) if x.ndim >= 2 and jnp.issubdtype(x.dtype, jnp.floating) else x

    return jax.tree.map(one, tree)


@functools.partial(jax.jit, static_argnames=("dtype", "out_shardings_key"))
def _to_rollout(params: Any, *, dtype: str, out_shardings_key: Any) -> Any:
    out = _cast_matrices(params, jnp.dtype(dtype))
    if out_shardings_key is not None:
        mesh, rules = out_shardings_key
        out = jax.lax.with_sharding_constraint(out, tree_shardings(out, mesh, rules))
    return out


def _top_p_filter(logits: jax.Array, top_p: jax.Array) -> jax.Array:
    """Keep the smallest set of tokens whose probability mass reaches top_p (ties included)."""
    sorted_logits = jnp.sort(logits, axis=-1)[:, ::-1]
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep = mass_before < top_p
    cutoff = jnp.min(jnp.where(keep, sorted_logits, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(logits >= cutoff, logits, -jnp.inf)


def _choose(
    logits: jax.Array, key: jax.Array, temperature: jax.Array, top_p: jax.Array,
    greedy: bool, use_top_p: bool,
) -> jax.Array:
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    scaled = logits / temperature
    if use_top_p:
        scaled = _top_p_filter(scaled, top_p)
    return jax.random.categorical(key, scaled, axis=-1).astype(jnp.int32)


@functools.partial(
    jax.jit,
    static_argnames=("graphdef", "max_new", "cache_len", "greedy", "use_top_p", "pad_id", "mesh",
                     "group", "fused_prefill", "steps_per_check"),
)
def _generate(
    graphdef: Any,
    params: Any,
    prompt: jax.Array,
    prompt_len: jax.Array,
    rng: jax.Array,
    eos_ids: jax.Array,
    temperature: jax.Array,
    top_p: jax.Array,
    *,
    max_new: int,
    cache_len: int,
    greedy: bool,
    use_top_p: bool,
    pad_id: int,
    mesh: Any = None,
    group: int = 1,
    row_limit: jax.Array | None = None,
    fused_prefill: bool = False,
    steps_per_check: int = 1,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """`prompt` [B/group, P] distinct prompts; rows r*group .. r*group+group-1 continue prompt r."""
    with activation_mesh(mesh):
        return _generate_body(graphdef, params, prompt, prompt_len, rng, eos_ids, temperature,
                              top_p, max_new=max_new, cache_len=cache_len, greedy=greedy,
                              use_top_p=use_top_p, pad_id=pad_id, group=group, row_limit=row_limit,
                              fused_prefill=fused_prefill, steps_per_check=steps_per_check)


def _generate_body(
    graphdef: Any, params: Any, prompt: jax.Array, prompt_len: jax.Array, rng: jax.Array,
    eos_ids: jax.Array, temperature: jax.Array, top_p: jax.Array, *, max_new: int,
    cache_len: int, greedy: bool, use_top_p: bool, pad_id: int, group: int, row_limit: jax.Array | None = None,
    fused_prefill: bool = False, steps_per_check: int = 1,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    from learner.lm.sharding import constrain

    model: Transformer = nnx.merge(graphdef, params)
    u, p = prompt.shape
    logits, cache, prompt_valid = prefill_left_padded(model, prompt, prompt_len, cache_len, fused_prefill)
    if group > 1:  # one prefill per distinct prompt, its cache shared by the group's rows

        def rep(x: jax.Array) -> jax.Array:
            return jnp.repeat(x, group, axis=0)

        logits, prompt_valid, prompt_len = rep(logits), rep(prompt_valid), rep(prompt_len)
        cache = tuple((constrain(rep(k), "cache"), constrain(rep(v), "cache")) for k, v in cache)
    b = u * group
    logits = constrain(logits, "rows")
    key_valid = jnp.zeros((b, cache_len), bool).at[:, :p].set(prompt_valid)

    out_tok, out_lp, done, n_steps, _ = decode_loop(
        model, logits, cache, key_valid, p, prompt_len, rng, eos_ids, temperature, top_p,
        max_new=max_new, greedy=greedy, use_top_p=use_top_p, pad_id=pad_id, row_limit=row_limit,
        steps_per_check=steps_per_check,
    )
    return out_tok, out_lp, done, n_steps


def prefill_left_padded(model: Transformer, prompt: jax.Array, prompt_len: jax.Array,
                        cache_len: int, fused: bool = False) -> tuple[jax.Array, Any, jax.Array]:
    """Prefill prompts left-padded to P (`prompt` [U, P], true lengths `prompt_len` [U]): rotary
    positions count from each prompt's first token and pad slots are masked. Returns the next
    token's logits [U, V], the KV cache (length `cache_len`, the prompt in slots 0..P-1, ending at
    slot P-1) and the prompt's valid mask [U, P]. Call inside jit.

    `fused`: each row is rotated to right padding, attention gets the row lengths (cuDNN runs that
    fused, with no [U, H, P, P] scores; `learner.lm.attention.causal_attention`), and the keys
    and values are rotated back: the same cache and logits as the masked path."""
    p = prompt.shape[1]
    pad = p - prompt_len
    idx = jnp.arange(p, dtype=jnp.int32)[None, :]
    prompt_valid = idx >= pad[:, None]
    if not fused:
        positions = jnp.maximum(idx - pad[:, None], 0)
        hidden, cache = model.prefill(prompt, positions, prompt_valid, cache_len)
        return model.logits(hidden[:, -1]), cache, prompt_valid
    if cache_len < p:
        raise ValueError(f"cache_len {cache_len} < prompt length {p}")
    right = jnp.take_along_axis(prompt, (idx + pad[:, None]) % p, axis=1)  # token j of each prompt at j
    positions = jnp.broadcast_to(idx, prompt.shape)
    hidden, kvs = model.hidden_states(right, positions, prompt_len.astype(jnp.int32), collect_kv=True)
    last = jnp.take_along_axis(hidden, (prompt_len - 1)[:, None, None].astype(jnp.int32), axis=1)[:, 0]
    back = ((idx - pad[:, None]) % p)[:, :, None, None]  # left-padded slot j <- right-padded j - pad
    kvs = [(jnp.take_along_axis(k, back, axis=1), jnp.take_along_axis(v, back, axis=1)) for k, v in kvs]
    return model.logits(last), model.cache_from_kv(kvs, cache_len), prompt_valid


def _probe_prefill(graphdef: Any, params: Any, prompt: jax.Array, lens: jax.Array) -> jax.Array:
    logits, _, _ = prefill_left_padded(nnx.merge(graphdef, params), prompt, lens, prompt.shape[1], fused=True)
    return logits


def decode_loop(
    model: Transformer,
    logits: jax.Array,
    cache: Any,
    key_valid: jax.Array,
    start_slot: int | jax.Array,
    start_pos: jax.Array,
    rng: jax.Array,
    eos_ids: jax.Array,
    temperature: jax.Array,
    top_p: jax.Array,
    *,
    max_new: int,
    greedy: bool,
    use_top_p: bool,
    pad_id: int,
    row_limit: jax.Array | None = None,
    steps_per_check: int = 1,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, Any]:
    """Device-side sampling loop (call inside jit); `row_limit` [B]: a row stops after that many
    tokens (default max_new; `done` then stays False for it, as for any row that hit the cap).
    `steps_per_check`: decode steps between two checks of whether every row is done (see
    `unrolled_body`); the tokens are the same for any value, the step count may round up.

    logits [B, V]: next-token logits after the prompt; cache: per-layer (k, v) [B, K, T, D];
    key_valid [B, T]; token i is written to cache slot start_slot + i with rotary position
    start_pos + i. Returns (tokens [B, max_new], logprobs at T=1 [B, max_new], done [B], steps,
    final cache).
    """
    b = logits.shape[0]
    out_tok = jnp.full((b, max_new), pad_id, jnp.int32)
    out_lp = jnp.zeros((b, max_new), jnp.float32)
    done = jnp.zeros((b,), bool)
    capped = row_limit is not None
    limit = jnp.full((b,), max_new, jnp.int32) if row_limit is None else row_limit

    def cond(carry: tuple[Any, ...]) -> jax.Array:
        i, done = carry[0], carry[5]
        return (i < max_new) & ~jnp.all(done | (i >= limit))

    def body(carry: tuple[Any, ...]) -> tuple[Any, ...]:
        i, logits, cache, key_valid, out, done = carry
        out_tok, out_lp = out
        tok = _choose(logits, jax.random.fold_in(rng, i), temperature, top_p, greedy, use_top_p)
        lp = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), tok[:, None], axis=-1)[:, 0]
        stopped = done | (i >= limit) if capped else done
        tok = jnp.where(stopped, pad_id, tok)
        lp = jnp.where(stopped, 0.0, lp)
        out_tok = jax.lax.dynamic_update_slice(out_tok, tok[:, None], (0, i))
        out_lp = jax.lax.dynamic_update_slice(out_lp, lp[:, None], (0, i))
        done = done | (~stopped & jnp.any(tok[:, None] == eos_ids[None, :], axis=-1))
        slot = start_slot + i
        key_valid = jax.lax.dynamic_update_slice(key_valid, jnp.ones((b, 1), bool), (0, slot))
        logits, cache = model.decode_step(tok, start_pos + i, cache, slot, key_valid)
        return i + 1, logits, cache, key_valid, (out_tok, out_lp), done

    carry = (jnp.int32(0), logits, cache, key_valid, (out_tok, out_lp), done)
    n_steps, _, cache, _, (out_tok, out_lp), done = jax.lax.while_loop(
        cond, unrolled_body(body, max_new, steps_per_check), carry)
    return out_tok, out_lp, done, n_steps, cache


def steps_between_checks(total: int, wanted: int) -> int:
    """The largest divisor of `total` steps that is at most `wanted` (so a loop that checks its
    condition every that many steps never runs past `total`)."""
    if wanted < 1:
        raise ValueError(f"steps_per_check must be >= 1, got {wanted}")
    return max(d for d in range(1, min(wanted, total) + 1) if total % d == 0) if total >= 1 else 1


def unrolled_body(step: Any, total: int, steps_per_check: int) -> Any:
    """A `lax.while_loop` body that runs `step` k times, k = `steps_between_checks(total,
    steps_per_check)` for a loop of at most `total` steps. On a GPU, XLA evaluates a while loop's
    condition on the device and copies it to the host before every iteration, so each decode
    step would drain the GPU's queue while the host launches the next step's kernels; an inner
    loop of k steps has a trip count XLA knows and runs without that round trip. Steps taken
    after every row stopped write pads (rows are masked), so only the step count changes."""
    k = steps_between_checks(total, steps_per_check)
    if k == 1:
        return step
    return lambda carry: jax.lax.fori_loop(0, k, lambda _, c: step(c), carry)


class Sampler:
    """Generates completions for batches of token-id prompts with a fixed model graph."""

    def __init__(
        self,
        model: Transformer,
        *,
        pad_id: int = 0,
        prompt_buckets: Sequence[int] | None = None,
        cache_buckets: Sequence[int] | None = None,
        min_bucket: int = 16,
        bucket_multiple: int = 512,
        mesh: jax.sharding.Mesh | None = None,
        rollout_dtype: str | None = None,
        steps_per_check: int = 1,
    ):
        """`mesh`: decode on it from a copy laid out by `ROLLOUT_RULES` (None: weights stay
        where they are). Weight matrices of the copy are stored in `rollout_dtype` (default:
        the model's compute dtype, e.g. bf16 for fp32 params with bf16 compute).
        `steps_per_check`: decode steps run between two checks of whether every row is done (a
        device-to-host round trip each on a GPU; `unrolled_body`). Same tokens for any value."""
        if steps_per_check < 1:
            raise SamplerError(f"steps_per_check must be >= 1, got {steps_per_check}")
        self.steps_per_check = int(steps_per_check)
        self.graphdef, params = nnx.split(model)
        self.pad_id = pad_id
        self.prompt_buckets = tuple(prompt_buckets) if prompt_buckets else None
        self.cache_buckets = tuple(cache_buckets) if cache_buckets else None
        self.min_bucket = min_bucket
        self.bucket_multiple = bucket_multiple
        self.mesh = mesh
        self.rollout_dtype = rollout_dtype or jnp.dtype(model.cfg.jnp_compute_dtype).name
        self.attention_impl = model.attention_impl
        self.fused_prefill: bool | None = None  # decided on first use (`use_fused_prefill`)
        self.update_params(params)

    def use_fused_prefill(self) -> bool:
        """Whether prompts are prefilled fused (`prefill_left_padded(fused=True)`): where the
        model's attention is cuDNN, once a small probe of that path compiled and ran; otherwise,
        or if the probe fails (logged), with masked attention over blocks of queries."""
        if self.fused_prefill is None:
            self.fused_prefill = False
            if self.attention_impl == "cudnn":
                try:
                    probe = jax.jit(functools.partial(_probe_prefill, self.graphdef))
                    jax.block_until_ready(probe(self.params, jnp.ones((2, 64), jnp.int32),
                                                jnp.array([3, 64], jnp.int32)))
                    self.fused_prefill = True
                except Exception as err:  # noqa: BLE001 - fall back to the masked path
                    log.warning("fused prefill unavailable (%s: %s); prompts are prefilled with masked "
                                "attention", type(err).__name__, str(err).splitlines()[0][:300])
        return self.fused_prefill

    def update_params(self, model_or_params: Any) -> None:
        """Use new weights (same graph) without recompiling: on a mesh, one jitted on-device
        cast + reshard of the trainer's params into the rollout copy (no host round trip)."""
        params = nnx.split(model_or_params)[1] if isinstance(model_or_params, nnx.Module) else model_or_params
        if self.mesh is None and all(x.dtype == jnp.dtype(self.rollout_dtype) or x.ndim < 2
                                     for x in jax.tree.leaves(params)):
            self.params = params
            return
        key = (self.mesh, ROLLOUT_RULES) if self.mesh is not None else None
        self.params = _to_rollout(params, dtype=self.rollout_dtype, out_shardings_key=key)

    def shapes_for(self, max_prompt_len: int, max_new_tokens: int) -> tuple[int, int]:
        p = bucket_length(max_prompt_len, self.prompt_buckets, self.min_bucket, self.bucket_multiple)
        t = bucket_length(p + max_new_tokens, self.cache_buckets, self.min_bucket, self.bucket_multiple)
        return p, t

    def generate(
        self, prompts: Sequence[Sequence[int]], cfg: SamplingConfig, rng: jax.Array,
        group: int = 1, limits: Sequence[int] | None = None,
    ) -> SampleResult:
        """Completions for `prompts`. `group` > 1: consecutive runs of `group` equal prompts
        share one prefill (falls back to one prefill per row when they are not equal). `limits`:
        per-prompt caps on new tokens (default `cfg.max_new_tokens`; a benchmark's stand-in for
        where an EOS would fall).

        In a multi-process run every process passes its own rows (the same number in each) and
        gets their completions back; the prompt bucket is agreed over all processes."""
        if not prompts or any(len(pr) == 0 for pr in prompts):
            raise SamplerError("every prompt needs at least one token")
        if group > 1 and not _grouped(prompts, group):
            group = 1
        distinct = list(prompts[::group])
        lens = np.array([len(pr) for pr in distinct], np.int32)
        p, t = self.shapes_for(global_max(int(lens.max())), cfg.max_new_tokens)
        batch = np.full((len(distinct), p), self.pad_id, np.int32)
        for row, pr in enumerate(distinct):
            batch[row, p - len(pr):] = pr
        greedy = cfg.temperature == 0.0
        eos = np.array(cfg.eos_ids or (-1,), np.int32)
        placed = shard_batch({"prompt": batch, "lens": lens}, self.mesh)
        row_limit = None
        if limits is not None:
            caps = np.minimum(np.asarray(limits, np.int32), cfg.max_new_tokens)
            if caps.shape != (len(prompts),) or (caps < 1).any():
                raise SamplerError("limits: one cap >= 1 per prompt")
            row_limit = shard_batch({"l": caps}, self.mesh)["l"]
        toks, lps, done, _ = _generate(
            self.graphdef,
            self.params,
            placed["prompt"],
            placed["lens"],
            rng,
            jnp.asarray(eos),
            jnp.float32(cfg.temperature if not greedy else 1.0),
            jnp.float32(cfg.top_p),
            max_new=cfg.max_new_tokens,
            cache_len=t,
            greedy=greedy,
            use_top_p=(not greedy) and cfg.top_p < 1.0,
            pad_id=self.pad_id,
            mesh=self.mesh,
            group=group,
            row_limit=row_limit,
            fused_prefill=self.use_fused_prefill(),
            steps_per_check=self.steps_per_check,
        )
        toks, lps, done = (host_local_rows(x, self.mesh) for x in (toks, lps, done))
        generated = None if limits is None else np.minimum(np.asarray(limits, np.int32), cfg.max_new_tokens)
        return self._finish(toks, lps, done, cfg, generated)

    def _finish(
        self, toks: np.ndarray, lps: np.ndarray, done: np.ndarray, cfg: SamplingConfig,
        generated: np.ndarray | None = None,
    ) -> SampleResult:
        """`done[r]`: row r emitted an EOS id; `generated[r]` (default: all columns) is how many
        tokens it produced otherwise."""
        toks, lps = toks.copy(), lps.copy()
        eos = set(cfg.eos_ids)
        lengths = np.zeros(len(toks), np.int32)
        reasons: list[str] = []
        for r, row in enumerate(toks):
            n, reason = (len(row) if generated is None else int(generated[r])), "length"
            if done[r]:
                n = next(j for j, tok in enumerate(row) if tok in eos) + 1
                reason = "eos"
            stop_end = _first_stop_end(row[:n].tolist(), cfg.stop_sequences)
            if stop_end is not None:
                n, reason = stop_end, "stop"
            toks[r, n:] = self.pad_id
            lps[r, n:] = 0.0
            lengths[r] = n
            reasons.append(reason)
        return SampleResult(tokens=toks, logprobs=lps, lengths=lengths, finish_reasons=reasons)


def _grouped(prompts: Sequence[Sequence[int]], group: int) -> bool:
    if len(prompts) % group:
        return False
    return all(list(prompts[i]) == list(prompts[i - i % group]) for i in range(len(prompts)))


def _first_stop_end(row: list[int], stops: Sequence[Sequence[int]]) -> int | None:
    """Index just past the earliest-ending stop sequence in `row`, if any."""
    best: int | None = None
    for stop in stops:
        k = len(stop)
        if k == 0:
            continue
        for end in range(k, len(row) + 1):
            if best is not None and end >= best:
                break
            if row[end - k:end] == list(stop):
                best = end
                break
    return best
