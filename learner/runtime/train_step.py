"""A generic jitted training step: `train_step(state, batch, loss_fn) -> (state, metrics)`.

`loss_fn(model, batch)` returns either `(loss_sum, count)` or `(loss_sum, count, aux)`; the step
minimises loss_sum / max(count, 1) with an optax optimizer (default: global-norm clipping + AdamW).
Params keep the sharding given by the state's mesh + partition rules.

`aux` is a dict of scalar arrays that is copied into the step's metrics unchanged, next to
"loss" (= loss_sum / max(count, 1)), "count" and "grad_norm". The loss function decides how its
aux entries are normalised: the GRPO loss (`learner.rl.grpo`) returns means that are already divided
by its own count, so they read directly as per-token (or per-sequence) values. Aux entries carry no
gradient; their names may not repeat those three reserved metric names.

`batch` is any dict of arrays, so per-token side inputs such as the behaviour policy's or a frozen
reference policy's log-probs are ordinary batch entries that the loss function reads.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from learner.lm.model import Transformer
from learner.lm.sharding import DEFAULT_RULES, PartitionRules, activation_mesh, tree_shardings
from learner.runtime.microbatch import split_micro_batches

LossOutput = tuple[jax.Array, jax.Array] | tuple[jax.Array, jax.Array, dict[str, jax.Array]]
LossFn = Callable[[Transformer, dict[str, Any]], LossOutput]

_RESERVED_METRICS = frozenset({"loss", "count", "grad_norm"})


def split_loss_output(out: Any) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """Normalise a loss_fn result to (loss_sum, count, aux); a 2-tuple gets an empty aux."""
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise TypeError(
            "loss_fn must return (loss_sum, count) or (loss_sum, count, aux), got "
            f"{type(out).__name__}" + (f" of length {len(out)}" if isinstance(out, tuple) else "")
        )
    if len(out) == 2:
        return out[0], out[1], {}
    loss_sum, count, aux = out
    if not isinstance(aux, dict):
        raise TypeError(f"loss_fn aux must be a dict of scalar arrays, got {type(aux).__name__}")
    clash = _RESERVED_METRICS.intersection(aux)
    if clash:
        raise ValueError(f"loss_fn aux keys {sorted(clash)} clash with the step's own metrics")
    for k, v in aux.items():
        if jnp.ndim(v) != 0:
            raise ValueError(f"loss_fn aux entry {k!r} must be a scalar, got shape {jnp.shape(v)}")
    return loss_sum, count, dict(aux)


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    grad_clip_norm: float | None = 1.0
    warmup_steps: int = 0
    # warmup-stable-decay: with decay_steps > 0 the rate falls linearly to 0 over the last
    # decay_steps of total_steps (a memorising SFT run settles far lower than at a constant rate)
    decay_steps: int = 0
    total_steps: int = 0


def learning_rate_schedule(cfg: OptimizerConfig) -> optax.Schedule:
    """Linear warm-up from 0 over `warmup_steps`, constant, then (with `decay_steps`) a linear
    decay to 0 that ends at `total_steps`."""
    if cfg.decay_steps < 0 or cfg.warmup_steps < 0:
        raise ValueError("warmup_steps and decay_steps must be >= 0")
    if cfg.decay_steps and cfg.warmup_steps + cfg.decay_steps > cfg.total_steps:
        raise ValueError(f"warmup_steps + decay_steps ({cfg.warmup_steps} + {cfg.decay_steps}) must not "
                         f"exceed total_steps ({cfg.total_steps})")
    parts: list[optax.Schedule] = []
    bounds: list[int] = []
    if cfg.warmup_steps > 0:
        parts.append(optax.linear_schedule(0.0, cfg.learning_rate, cfg.warmup_steps))
        bounds.append(cfg.warmup_steps)
    parts.append(optax.constant_schedule(cfg.learning_rate))
    if cfg.decay_steps > 0:
        bounds.append(cfg.total_steps - cfg.decay_steps)
        parts.append(optax.linear_schedule(cfg.learning_rate, 0.0, cfg.decay_steps))
    return parts[0] if len(parts) == 1 else optax.join_schedules(parts, bounds)


def make_optimizer(cfg: OptimizerConfig) -> optax.GradientTransformation:
    lr = learning_rate_schedule(cfg)
    parts = []
    if cfg.grad_clip_norm is not None:
        parts.append(optax.clip_by_global_norm(cfg.grad_clip_norm))
    parts.append(optax.adamw(lr, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay))
    return optax.chain(*parts)


@struct.dataclass
class TrainState:
    step: jax.Array
    params: Any  # nnx.State of Params
    opt_state: Any
    rng: jax.Array  # raw uint32 PRNG key data, for trainers that need randomness
    graphdef: Any = struct.field(pytree_node=False)
    tx: optax.GradientTransformation = struct.field(pytree_node=False)
    mesh: Mesh | None = struct.field(pytree_node=False, default=None)
    rules: PartitionRules = struct.field(pytree_node=False, default=DEFAULT_RULES)

    @property
    def model(self) -> Transformer:
        return nnx.merge(self.graphdef, self.params)

    def checkpoint_items(self) -> dict[str, Any]:
        """The array part of the state, as saved by `learner.runtime.checkpoint`."""
        return {"step": self.step, "params": self.params, "opt_state": self.opt_state, "rng": self.rng}

    def with_items(self, items: dict[str, Any]) -> TrainState:
        return self.replace(**items)


def create_train_state(
    model: Transformer,
    tx: optax.GradientTransformation,
    *,
    seed: int = 0,
    mesh: Mesh | None = None,
    rules: PartitionRules = DEFAULT_RULES,
) -> TrainState:
    """Optimizer state is created with the same partitioning as the params it mirrors."""
    graphdef, params = nnx.split(model)
    if mesh is not None:
        abstract = jax.eval_shape(tx.init, params)
        opt_state = jax.jit(tx.init, out_shardings=tree_shardings(abstract, mesh, rules))(params)
    else:
        opt_state = jax.jit(tx.init)(params)
    def start() -> tuple[jax.Array, jax.Array]:
        return jnp.zeros((), jnp.int32), jax.random.PRNGKey(seed)

    # replicated on the mesh, as the step returns them (no second compile); made by a jitted
    # function, so that across processes they are global arrays too
    step, rng = start() if mesh is None else jax.jit(start, out_shardings=NamedSharding(mesh, P()))()
    return TrainState(
        step=step,
        params=params,
        opt_state=opt_state,
        rng=rng,
        graphdef=graphdef,
        tx=tx,
        mesh=mesh,
        rules=tuple(rules),
    )


def abstract_train_state(
    graphdef: Any,
    abstract_params: Any,
    tx: optax.GradientTransformation,
    *,
    mesh: Mesh,
    rules: PartitionRules = DEFAULT_RULES,
) -> TrainState:
    """The shapes, dtypes and shardings of the state `create_train_state` would build, and no
    arrays: the target a checkpoint restore fills (learner.runtime.checkpoint), at no device memory."""
    opt = jax.eval_shape(tx.init, abstract_params)
    opt = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), opt,
                       tree_shardings(opt, mesh, rules))
    replicated = NamedSharding(mesh, P())
    key = jax.eval_shape(lambda: jax.random.PRNGKey(0))
    return TrainState(
        step=jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated),
        params=abstract_params,
        opt_state=opt,
        rng=jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=replicated),
        graphdef=graphdef,
        tx=tx,
        mesh=mesh,
        rules=tuple(rules),
    )


def _accumulate(
    state: TrainState, batch: dict[str, Any], loss_fn: LossFn, micro_batches: int
) -> tuple[Any, jax.Array, jax.Array, dict[str, jax.Array]]:
    """(summed grads of loss_sum, loss_sum, count, aux) over `micro_batches` slices of `batch`.

    aux entries are combined as count-weighted means (they are per-count means in every slice),
    except names ending in "_max", which take the maximum.
    """

    def grads_of(params: Any, mb: dict[str, Any]) -> Any:
        def objective(p: Any) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
            loss_sum, count, aux = split_loss_output(loss_fn(nnx.merge(state.graphdef, p), mb))
            return loss_sum, (count, aux)

        return jax.value_and_grad(objective, has_aux=True)(params)

    if micro_batches == 1:
        (loss_sum, (count, aux)), grads = grads_of(state.params, batch)
        return grads, loss_sum, count, aux

    mbs = split_micro_batches(batch, micro_batches)
    first = jax.tree.map(lambda x: x[0], mbs)
    (_, (_, aux_shape)), _ = jax.eval_shape(grads_of, state.params, first)

    def body(carry: Any, mb: dict[str, Any]) -> tuple[Any, None]:
        g_acc, l_acc, c_acc, a_acc = carry
        (loss_sum, (count, aux)), grads = grads_of(state.params, mb)
        g_acc = jax.tree.map(lambda a, g: a + g.astype(a.dtype), g_acc, grads)
        a_acc = {k: (jnp.maximum(a_acc[k], aux[k]) if k.endswith("_max")
                     else a_acc[k] + aux[k] * count) for k in a_acc}
        return (g_acc, l_acc + loss_sum, c_acc + count, a_acc), None

    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), state.params)
    if state.mesh is not None:
        zeros = jax.lax.with_sharding_constraint(zeros, tree_shardings(zeros, state.mesh, state.rules))
    aux0 = {k: jnp.full((), -jnp.inf if k.endswith("_max") else 0.0, jnp.float32) for k in aux_shape}
    carry = (zeros, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32), aux0)
    (grads, loss_sum, count, aux_acc), _ = jax.lax.scan(body, carry, mbs)
    denom = jnp.maximum(count, 1.0)
    aux = {k: v if k.endswith("_max") else v / denom for k, v in aux_acc.items()}
    return grads, loss_sum, count, aux


def _train_step(
    state: TrainState, batch: dict[str, Any], loss_fn: LossFn, micro_batches: int = 1
) -> tuple[TrainState, dict[str, jax.Array]]:
    with activation_mesh(state.mesh):
        grads, loss_sum, count, aux = _accumulate(state, batch, loss_fn, micro_batches)
    denom = jnp.maximum(count, 1.0)
    loss = loss_sum / denom
    grads = jax.tree.map(lambda g, p: (g / denom).astype(p.dtype), grads, state.params)
    updates, opt_state = state.tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    if state.mesh is not None:
        params = jax.lax.with_sharding_constraint(
            params, tree_shardings(params, state.mesh, state.rules)
        )
        opt_state = jax.lax.with_sharding_constraint(
            opt_state, tree_shardings(opt_state, state.mesh, state.rules)
        )
    metrics = {"loss": loss, "count": count, "grad_norm": optax.tree.norm(grads), **aux}
    new_state = state.replace(
        step=state.step + 1,
        params=params,
        opt_state=opt_state,
        rng=jax.random.fold_in(state.rng, state.step),
    )
    return new_state, metrics


@functools.partial(
    jax.jit, static_argnames=("loss_fn", "micro_batches"), donate_argnames=("state",)
)
def train_step(
    state: TrainState, batch: dict[str, Any], loss_fn: LossFn, micro_batches: int = 1
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer step on `batch`; `state` is donated.

    `micro_batches` > 1 splits the batch's rows into that many slices (`learner.runtime.microbatch`)
    whose gradients of loss_sum and counts are summed before one division and one update:
    the same step in less activation memory.
    """
    return _train_step(state, batch, loss_fn, micro_batches)


def grads_and_loss(
    state: TrainState, batch: dict[str, Any], loss_fn: LossFn
) -> tuple[jax.Array, Any]:
    """(mean loss, grads) without updating: used by sharding equivalence tests and debugging.

    Any aux returned by `loss_fn` is ignored here.
    """

    def objective(params: Any) -> jax.Array:
        loss_sum, count, _ = split_loss_output(loss_fn(nnx.merge(state.graphdef, params), batch))
        return loss_sum / jnp.maximum(count, 1.0)

    with activation_mesh(state.mesh):
        return jax.value_and_grad(objective)(state.params)
