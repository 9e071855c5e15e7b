"""Continuous batching: B decode rows, each refilled with the next pending prompt as soon as its
completion ends, so the batch does not go on decoding for rows that finished long ago.

Layout. The KV cache is a ring of T slots per row, and every row writes step i's key/value into
slot i mod T (one shared write index, as in the static sampler, so the model's decode step is
unchanged). Rotary positions are applied before keys are cached and attention masks keys by
`key_valid` [B, T], so a key's slot carries no order: a row's live keys are the last (prompt +
generated) slots it wrote, at most P + max_new <= T of them, and the older slots (its previous
occupant's) are masked. A refilled row's prompt, left-padded to P, is prefilled and written into
the P slots just before the next write slot; its first logits replace the row's and its rotary
positions restart at 0. Prompts of one refill that are equal (the G samples of a GRPO group) are
prefilled once.

The host loop runs `chunk` decode steps on the device at a time (`lax.while_loop`), and returns
early once enough rows finished to be worth a refill (`refill_batch`, or fewer when fewer prompts
wait); it then collects the finished completions and refills those rows. Sampling uses one key per
global step, so completions are a valid sample but not the static sampler's; greedy decoding gives
the same tokens (tests/learner/test_engine.py).

Single process only: the loop's length depends on the sampled lengths, which differ between the
processes of a multi-host run (use the static `Sampler` there).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from learner.lm.sampler import (
    Sampler,
    SamplerError,
    SampleResult,
    SamplingConfig,
    _choose,
    prefill_left_padded,
    unrolled_body,
)
from learner.lm.sharding import activation_mesh, constrain

log = logging.getLogger(__name__)


@dataclasses.dataclass
class EngineStats:
    """What one `generate` cost: decode steps (each over all B rows), the tokens they produced for
    live completions, host round trips, refill calls and prompts prefilled."""

    steps: int = 0
    rows: int = 0
    tokens: int = 0
    chunks: int = 0
    refills: int = 0
    prefilled: int = 0

    @property
    def row_efficiency(self) -> float:
        """Useful tokens per row-step: 1.0 when no row ever decodes for a finished completion."""
        return self.tokens / (self.steps * self.rows) if self.steps and self.rows else 0.0


def _pow2_at_least(n: int, cap: int) -> int:
    return min(cap, 1 << max(0, (n - 1).bit_length()))


@functools.partial(jax.jit, static_argnames=("rows", "cache_len", "max_new", "vocab", "num_layers", "kv_heads",
                                             "head_dim", "dtype", "pad_id", "mesh"))
def _init_state(*, rows: int, cache_len: int, max_new: int, vocab: int, num_layers: int, kv_heads: int,
                head_dim: int, dtype: Any, pad_id: int, mesh: Any) -> dict[str, Any]:
    with activation_mesh(mesh):
        shape = (rows, kv_heads, cache_len, head_dim)
        cache = tuple((constrain(jnp.zeros(shape, dtype), "cache"), constrain(jnp.zeros(shape, dtype), "cache"))
                      for _ in range(num_layers))
        return {
            "cache": cache,
            "key_valid": jnp.zeros((rows, cache_len), bool),
            "logits": jnp.zeros((rows, vocab), jnp.float32),
            "pos": jnp.zeros((rows,), jnp.int32),
            "gen": jnp.zeros((rows,), jnp.int32),
            "limit": jnp.zeros((rows,), jnp.int32),
            "done": jnp.ones((rows,), bool),  # idle until refilled
            "out_tok": jnp.full((rows, max_new), pad_id, jnp.int32),
            "out_lp": jnp.zeros((rows, max_new), jnp.float32),
            "step": jnp.int32(0),
        }


@functools.partial(jax.jit, static_argnames=("graphdef", "chunk", "greedy", "use_top_p", "pad_id", "mesh",
                                             "steps_per_check"),
                   donate_argnames=("state",))
def _decode_chunk(graphdef: Any, params: Any, state: dict[str, Any], rng: jax.Array, eos_ids: jax.Array,
                  temperature: jax.Array, top_p: jax.Array, stop_at_done: jax.Array, *, chunk: int,
                  greedy: bool, use_top_p: bool, pad_id: int, mesh: Any, steps_per_check: int = 1) -> dict[str, Any]:
    """Up to `chunk` decode steps over every row; stops early once `stop_at_done` rows are done,
    checked every `steps_per_check` steps (a divisor of `chunk`; `sampler.unrolled_body`)."""
    with activation_mesh(mesh):
        model = nnx.merge(graphdef, params)
        b, t = state["key_valid"].shape
        max_new = state["out_tok"].shape[1]
        rows = jnp.arange(b)

        def cond(carry: tuple[Any, ...]) -> jax.Array:
            n, s = carry
            finished = jnp.sum(s["done"])
            return (n < chunk) & (finished < stop_at_done) & (finished < b)

        def body(carry: tuple[Any, ...]) -> tuple[Any, ...]:
            n, s = carry
            i = s["step"]
            active = ~s["done"]
            tok = _choose(s["logits"], jax.random.fold_in(rng, i), temperature, top_p, greedy, use_top_p)
            lp = jnp.take_along_axis(jax.nn.log_softmax(s["logits"], axis=-1), tok[:, None], axis=-1)[:, 0]
            col = jnp.where(active, s["gen"], max_new)  # out of range: dropped for idle rows
            out_tok = s["out_tok"].at[rows, col].set(tok, mode="drop")
            out_lp = s["out_lp"].at[rows, col].set(lp, mode="drop")
            gen = s["gen"] + active.astype(jnp.int32)
            stop = jnp.any(tok[:, None] == eos_ids[None, :], axis=-1) | (gen >= s["limit"])
            done = s["done"] | (active & stop)
            slot = i % t
            key_valid = s["key_valid"].at[:, slot].set(active)
            logits, cache = model.decode_step(tok, s["pos"], s["cache"], slot, key_valid)
            return n + 1, {
                "cache": cache, "key_valid": key_valid, "logits": logits, "pos": s["pos"] + active.astype(jnp.int32),
                "gen": gen, "limit": s["limit"], "done": done, "out_tok": out_tok, "out_lp": out_lp, "step": i + 1,
            }

        _, state = jax.lax.while_loop(cond, unrolled_body(body, chunk, steps_per_check), (jnp.int32(0), state))
        return state


@functools.partial(jax.jit, static_argnames=("graphdef", "pad_id", "mesh", "fused_prefill"), donate_argnames=("state",))
def _refill(graphdef: Any, params: Any, state: dict[str, Any], prompts: jax.Array, lens: jax.Array,
            which: jax.Array, rows: jax.Array, limits: jax.Array, *, pad_id: int, mesh: Any,
            fused_prefill: bool = False) -> dict[str, Any]:
    """Prefill the distinct `prompts` [U, P] (left-padded, true lengths `lens`) and start row
    `rows[r]` on prompt `which[r]` with at most `limits[r]` new tokens; rows[r] = B drops entry r."""
    with activation_mesh(mesh):
        model = nnx.merge(graphdef, params)
        b, t = state["key_valid"].shape
        _, p = prompts.shape
        first, kv, prompt_valid = prefill_left_padded(model, prompts, lens, p, fused_prefill)
        slots = (state["step"] - p + jnp.arange(p)) % t  # the P slots before the next write slot
        cache = []
        for (kc, vc), (k, v) in zip(state["cache"], kv, strict=True):
            k_rows = jnp.take(k, which, axis=0).transpose(0, 2, 1, 3).astype(kc.dtype)  # [R, P, K, D]
            v_rows = jnp.take(v, which, axis=0).transpose(0, 2, 1, 3).astype(vc.dtype)
            kc = kc.at[rows[:, None], :, slots[None, :], :].set(k_rows, mode="drop")
            vc = vc.at[rows[:, None], :, slots[None, :], :].set(v_rows, mode="drop")
            cache.append((constrain(kc, "cache"), constrain(vc, "cache")))
        valid = jnp.zeros((rows.shape[0], t), bool).at[:, slots].set(jnp.take(prompt_valid, which, axis=0))
        max_new = state["out_tok"].shape[1]
        return {
            "cache": tuple(cache),
            "key_valid": state["key_valid"].at[rows].set(valid, mode="drop"),
            "logits": state["logits"].at[rows].set(jnp.take(first, which, axis=0), mode="drop"),
            "pos": state["pos"].at[rows].set(jnp.take(lens, which), mode="drop"),
            "gen": state["gen"].at[rows].set(0, mode="drop"),
            "limit": state["limit"].at[rows].set(limits, mode="drop"),
            "done": state["done"].at[rows].set(False, mode="drop"),
            "out_tok": state["out_tok"].at[rows].set(jnp.full((rows.shape[0], max_new), pad_id, jnp.int32),
                                                      mode="drop"),
            "out_lp": state["out_lp"].at[rows].set(jnp.zeros((rows.shape[0], max_new), jnp.float32), mode="drop"),
            "step": state["step"],
        }


class ContinuousSampler(Sampler):
    """`Sampler` whose `generate` keeps `rows` decode rows busy, refilling each as it finishes.

    rows: decode rows on the device (the static sampler's batch size plays this part);
    chunk: decode steps per device call at most; refill_batch: finished rows worth returning to
    the host for (default rows // 8, at least 1)."""

    def __init__(self, model: Any, *, rows: int, chunk: int = 64, refill_batch: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.model_cfg = model.cfg
        if rows < 1 or chunk < 1:
            raise SamplerError(f"continuous batching needs rows >= 1 and chunk >= 1 (got {rows}, {chunk})")
        self.rows = rows
        self.chunk = chunk
        self.refill_batch = max(1, refill_batch if refill_batch is not None else rows // 8)
        self.stats = EngineStats()

    def generate(self, prompts: Sequence[Sequence[int]], cfg: SamplingConfig, rng: jax.Array, group: int = 1,
                 limits: Sequence[int] | None = None) -> SampleResult:
        """Completions for `prompts`, in their order. `group` is accepted for the static sampler's
        signature: equal prompts refilled together share one prefill whatever it is. `limits`:
        per-prompt caps on new tokens (default `cfg.max_new_tokens`; a benchmark's stand-in for
        where an EOS would fall)."""
        if jax.process_count() > 1:
            raise SamplerError("continuous batching runs in one process; use the static Sampler in multi-host runs")
        if not prompts or any(len(pr) == 0 for pr in prompts):
            raise SamplerError("every prompt needs at least one token")
        n, max_new = len(prompts), cfg.max_new_tokens
        caps = np.full(n, max_new, np.int32) if limits is None else np.minimum(np.asarray(limits, np.int32), max_new)
        if caps.shape != (n,) or (caps < 1).any():
            raise SamplerError("limits: one cap >= 1 per prompt")
        p, t = self.shapes_for(max(len(pr) for pr in prompts), max_new)
        b = self.rows
        mc = self.model_cfg
        state = _init_state(rows=b, cache_len=t, max_new=max_new, vocab=mc.vocab_size, num_layers=mc.num_layers,
                            kv_heads=mc.num_kv_heads, head_dim=mc.head_dim, dtype=mc.jnp_compute_dtype,
                            pad_id=self.pad_id, mesh=self.mesh)
        greedy = cfg.temperature == 0.0
        eos = jnp.asarray(np.array(cfg.eos_ids or (-1,), np.int32))
        temp, top_p = jnp.float32(cfg.temperature if not greedy else 1.0), jnp.float32(cfg.top_p)
        use_top_p = (not greedy) and cfg.top_p < 1.0
        toks = np.full((n, max_new), self.pad_id, np.int32)
        lps = np.zeros((n, max_new), np.float32)
        finished = np.zeros(n, bool)
        generated = np.zeros(n, np.int32)
        occupant = np.full(b, -1, np.int64)
        queue = collections.deque(range(n))
        stats = EngineStats(rows=b)
        state = self._fill(state, queue, occupant, np.arange(b), prompts, caps, p, stats)
        while (occupant >= 0).any():
            stop_at = min(self.refill_batch, len(queue)) if queue else b
            state = _decode_chunk(self.graphdef, self.params, state, rng, eos, temp, top_p, jnp.int32(stop_at),
                                  chunk=self.chunk if queue else max_new, greedy=greedy, use_top_p=use_top_p,
                                  pad_id=self.pad_id, mesh=self.mesh, steps_per_check=self.steps_per_check)
            stats.chunks += 1
            done, gen = (np.asarray(x) for x in jax.device_get((state["done"], state["gen"])))
            ended = np.flatnonzero(done & (occupant >= 0))
            if ended.size:
                out_tok, out_lp = (np.asarray(x) for x in jax.device_get((state["out_tok"], state["out_lp"])))
                for r in ended:
                    k = int(occupant[r])
                    toks[k], lps[k] = out_tok[r], out_lp[r]
                    finished[k] = bool(np.isin(out_tok[r, : gen[r]], np.asarray(cfg.eos_ids or (-1,))).any())
                    generated[k] = gen[r]
                    stats.tokens += int(gen[r])
                    occupant[r] = -1
            if queue and ended.size:
                state = self._fill(state, queue, occupant, ended, prompts, caps, p, stats)
        stats.steps = int(jax.device_get(state["step"]))
        self.stats = stats
        log.debug("continuous batching: %s (row efficiency %.2f)", stats, stats.row_efficiency)
        return self._finish(toks, lps, finished, cfg, generated)

    def _fill(self, state: dict[str, Any], queue: collections.deque[int], occupant: np.ndarray,
              free: np.ndarray, prompts: Sequence[Sequence[int]], caps: np.ndarray, p: int,
              stats: EngineStats) -> dict[str, Any]:
        """Start the next prompts of `queue` on the `free` rows (one refill call)."""
        take = [queue.popleft() for _ in range(min(len(free), len(queue)))]
        if not take:
            return state
        rows = free[: len(take)]
        occupant[rows] = take
        distinct: dict[tuple[int, ...], int] = {}
        which = [distinct.setdefault(tuple(prompts[k]), len(distinct)) for k in take]
        # Shapes that compile once each: the prefill over a power-of-two count of distinct prompts
        # (what costs), the scatter always over every row (entries past the refill are dropped).
        u = _pow2_at_least(len(distinct), self.rows)
        r = self.rows
        batch = np.full((u, p), self.pad_id, np.int32)
        lens = np.ones(u, np.int32)
        for pr, j in distinct.items():
            batch[j, p - len(pr):] = pr
            lens[j] = len(pr)
        rows_arr = np.full(r, self.rows, np.int32)  # B: dropped
        rows_arr[: len(take)] = rows
        which_arr = np.zeros(r, np.int32)
        which_arr[: len(take)] = which
        limits = np.ones(r, np.int32)
        limits[: len(take)] = caps[take]
        stats.refills += 1
        stats.prefilled += len(distinct)
        return _refill(self.graphdef, self.params, state, jnp.asarray(batch), jnp.asarray(lens),
                       jnp.asarray(which_arr), jnp.asarray(rows_arr), jnp.asarray(limits),
                       pad_id=self.pad_id, mesh=self.mesh, fused_prefill=self.use_fused_prefill())


def row_steps_static(lengths: Sequence[int], batch: int) -> int:
    """Row-steps a static sampler spends on `lengths` (in order, `batch` rows at a time, each batch
    decoding until its longest row ends): the counterpart of `EngineStats.steps * rows`."""
    total = 0
    for s in range(0, len(lengths), batch):
        total += batch * max(lengths[s:s + batch])
    return total


def expected_static_efficiency(lengths: Sequence[int], batch: int) -> float:
    return sum(lengths) / row_steps_static(lengths, batch) if lengths else math.nan
