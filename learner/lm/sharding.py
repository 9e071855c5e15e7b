"""Device mesh ("data", "fsdp", "tensor") and regex partition rules applied by parameter path.

The same rules shard model params, optimizer state (whose paths end with the param path) and
anything else addressed by path. A rule's PartitionSpec axis is dropped for a dimension it does
not divide evenly, so one rule set works for every model size and every mesh, including 1 device.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

log = logging.getLogger(__name__)

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

PartitionRules = Sequence[tuple[str, P]]

# First match wins; patterns are `re.search`-ed against "a/b/c" paths.
DEFAULT_RULES: tuple[tuple[str, P], ...] = (
    (r"embed_tokens/embedding$", P("tensor", "fsdp")),
    (r"(q_proj|k_proj|v_proj|gate_proj|up_proj)/kernel$", P("fsdp", "tensor")),
    (r"(q_proj|k_proj|v_proj|gate_proj|up_proj)/bias$", P("tensor")),
    (r"(o_proj|down_proj)/kernel$", P("tensor", "fsdp")),
    (r"(o_proj|down_proj)/bias$", P()),
    (r"lm_head/kernel$", P("fsdp", "tensor")),
    (r"(scale)$", P()),
    (r".*", P()),
)


class MeshConfigError(ValueError):
    """Mesh sizes do not fit the available devices."""


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Sizes of the mesh axes; exactly one may be -1 ("all remaining devices")."""

    data: int = 1
    fsdp: int = -1
    tensor: int = 1

    def resolve(self, num_devices: int) -> tuple[int, int, int]:
        sizes = [self.data, self.fsdp, self.tensor]
        if sizes.count(-1) > 1:
            raise MeshConfigError(f"at most one mesh axis may be -1, got {sizes}")
        known = int(np.prod([s for s in sizes if s != -1]))
        if known <= 0 or num_devices % known:
            raise MeshConfigError(f"mesh sizes {sizes} do not divide {num_devices} devices")
        sizes = [num_devices // known if s == -1 else s for s in sizes]
        if int(np.prod(sizes)) != num_devices:
            raise MeshConfigError(f"mesh {sizes} uses {np.prod(sizes)} of {num_devices} devices")
        return sizes[0], sizes[1], sizes[2]


def make_mesh(cfg: MeshConfig | None = None, devices: Sequence[jax.Device] | None = None) -> Mesh:
    cfg = cfg or MeshConfig()
    devices = list(devices) if devices is not None else jax.devices()
    shape = cfg.resolve(len(devices))
    try:
        arr = mesh_utils.create_device_mesh(shape, devices=devices)
    except (ValueError, AssertionError, NotImplementedError):  # odd topology: plain reshape
        arr = np.asarray(devices).reshape(shape)
    mesh = Mesh(arr, MESH_AXES)
    log.info("mesh %s over %d devices", dict(zip(MESH_AXES, shape, strict=True)), len(devices))
    return mesh


def path_to_str(path: Sequence[Any]) -> str:
    parts = []
    for k in path:
        name = getattr(k, "key", None)
        if name is None:
            name = getattr(k, "name", None)
        if name is None:
            name = getattr(k, "idx", k)
        if name in ("value", "raw_value"):
            continue
        parts.append(str(name))
    return "/".join(parts)


def fit_spec(spec: P, shape: Sequence[int], mesh: Mesh) -> P:
    """Drop mesh axes that do not divide the dimension they shard (and extra trailing axes)."""
    out: list[Any] = []
    for dim, axes in enumerate(tuple(spec)[: len(shape)]):
        if axes is None:
            out.append(None)
            continue
        names = axes if isinstance(axes, tuple) else (axes,)
        size = int(np.prod([mesh.shape[a] for a in names]))
        out.append(axes if shape[dim] % size == 0 else None)
    return P(*out)


def spec_for_path(path: str, shape: Sequence[int], mesh: Mesh, rules: PartitionRules) -> P:
    for pattern, spec in rules:
        if re.search(pattern, path):
            return fit_spec(spec, shape, mesh)
    return P()


def tree_shardings(
    tree: Any, mesh: Mesh, rules: PartitionRules = DEFAULT_RULES
) -> Any:
    """NamedSharding for every array leaf of `tree` (arrays or ShapeDtypeStructs)."""

    def one(path: Sequence[Any], leaf: Any) -> NamedSharding:
        shape = getattr(leaf, "shape", ())
        return NamedSharding(mesh, spec_for_path(path_to_str(path), shape, mesh, rules))

    return jax.tree_util.tree_map_with_path(one, tree)


def shard_tree(tree: Any, mesh: Mesh, rules: PartitionRules = DEFAULT_RULES) -> Any:
    return jax.device_put(tree, tree_shardings(tree, mesh, rules))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Leading (batch) dim over data+fsdp, the rest replicated."""
    return NamedSharding(mesh, P(BATCH_AXES, *([None] * (ndim - 1))))


def batch_size_multiple(mesh: Mesh) -> int:
    """Rows of a batch must be a multiple of this to be split over the batch axes."""
    return int(np.prod([mesh.shape[a] for a in BATCH_AXES]))


def shard_batch(batch: Any, mesh: Mesh | None) -> Any:
    """Place a host batch (dict of arrays, leading dim = rows) on the mesh, rows over data+fsdp.

    Single process: `jax.device_put`. Multi-process: every process passes the rows it owns
    (its slice of the global batch, in process order) and the global array is assembled with
    `jax.make_array_from_process_local_data`. A leading dim that the batch axes do not divide
    is replicated (correct, just not parallel), with a warning; across processes that is an
    error (MeshConfigError), since each process holds different rows.
    """
    if mesh is None:
        return jax.tree.map(jax.numpy.asarray, batch)

    procs = jax.process_count()

    def one(x: Any) -> jax.Array:
        x = np.asarray(x)
        # the global batch has every process's rows
        spec = fit_spec(P(BATCH_AXES), (x.shape[0] * procs,), mesh) if x.ndim else P()
        if x.ndim and spec == P(None) and mesh.size > 1:
            _warn_replicated(int(x.shape[0]), batch_size_multiple(mesh))
        sharding = NamedSharding(mesh, spec)
        if jax.process_count() > 1:
            if x.ndim and spec == P(None):
                raise MeshConfigError(
                    f"{x.shape[0]} rows per process do not split over this process's share of the "
                    f"{batch_size_multiple(mesh)} batch shards; use a multiple of "
                    f"{batch_size_multiple(mesh) // jax.process_count()} rows per process")
            return jax.make_array_from_process_local_data(sharding, x)
        return jax.device_put(x, sharding)

    return jax.tree.map(one, batch)


def host_local_rows(x: jax.Array, mesh: Mesh | None) -> np.ndarray:
    """The rows of a row-sharded global array that this process placed (all of them, when single
    process): the inverse of `shard_batch` for results such as generated tokens."""
    if mesh is None or jax.process_count() == 1:
        return np.asarray(x)
    from jax.experimental import multihost_utils

    local = multihost_utils.global_array_to_host_local_array(x, mesh, P(BATCH_AXES))
    return np.asarray(local)


def global_max(value: int) -> int:
    """max of an int over all processes (itself when single process): agreeing on shapes."""
    if jax.process_count() == 1:
        return int(value)
    from jax.experimental import multihost_utils

    return int(np.max(multihost_utils.process_allgather(np.asarray(value, np.int64))))


@functools.lru_cache(maxsize=64)
def _warn_replicated(rows: int, shards: int) -> None:
    log.warning("a batch of %d rows is not a multiple of the %d batch shards: replicated "
                "(correct, not parallel); use batch sizes that are multiples of %d",
                rows, shards, shards)


# ----------------------------------------------------------------------------- activations
# The mesh that activation constraints refer to while a step is traced (None: no constraints,
# e.g. a model used outside any mesh). Set by `activation_mesh`, read by `constrain`.
_ACTIVATION_MESH: contextvars.ContextVar[Mesh | None] = contextvars.ContextVar(
    "activation_mesh", default=None
)


@contextlib.contextmanager
def activation_mesh(mesh: Mesh | None) -> Iterator[None]:
    """Trace model code under this context to pin its activations to `mesh` (see `constrain`)."""
    token = _ACTIVATION_MESH.set(mesh)
    try:
        yield
    finally:
        _ACTIVATION_MESH.reset(token)


def current_activation_mesh() -> Mesh | None:
    return _ACTIVATION_MESH.get()


# Activation layouts by role; the leading dim is always the batch (rows).
ACTIVATION_SPECS: dict[str, P] = {
    "hidden": P(BATCH_AXES, None, None),  # [B, S, d]
    "heads": P(BATCH_AXES, None, "tensor", None),  # [B, S, H, D]
    "ffn": P(BATCH_AXES, None, "tensor"),  # [B, S, F]
    "rows": P(BATCH_AXES),  # [B, ...] anything with rows first
    "cache": P(BATCH_AXES, "tensor", None, None),  # [B, K, T, D] KV cache
    "micro": P(None, BATCH_AXES),  # [n, B/n, ...] micro-batches (learner.runtime.microbatch)
}


def constrain(x: jax.Array, role: str) -> jax.Array:
    """`with_sharding_constraint` of an activation to its role's layout on the activation mesh.

    Without a constraint XLA's partitioner is free to all-gather the batch next to weights
    sharded along their contracting dimension (FSDP), so every device would hold full-batch
    activations; pinning the rows to the batch axes keeps per-device activation memory and
    FLOPs at 1/N. Axes that do not divide a dimension are dropped (same code on 1..N devices).
    """
    mesh = _ACTIVATION_MESH.get()
    if mesh is None or mesh.size == 1:
        return x
    spec = fit_spec(ACTIVATION_SPECS[role], x.shape, mesh)
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


INIT_PLACEMENTS = ("auto", "device", "host", "jit")


def init_placement(mesh: Mesh, state_bytes: int, requested: str = "auto") -> str:
    """Where `create_sharded_model` builds the weights (see there). "auto": on the device when the
    mesh has one; else on the host when JAX has a CPU backend and every copy this host holds fits
    in half of its memory (one copy per process: `LEARNER_PROCESSES_PER_HOST` processes of a
    multi-process run share a host, default 1; `scripts/learner_processes.sh` sets it); else one
    jitted program that writes each shard where it lives."""
    if requested not in INIT_PLACEMENTS:
        raise ValueError(f"init placement {requested!r}: expected one of {', '.join(INIT_PLACEMENTS)}")
    if requested != "auto":
        return requested
    if mesh.size == 1:
        return "device"
    copies = processes_per_host() if jax.process_count() > 1 else 1
    try:
        jax.local_devices(backend="cpu")
    except RuntimeError:
        return "jit"
    try:
        host_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "jit"
    return "host" if state_bytes * copies <= host_bytes // 2 else "jit"


def processes_per_host() -> int:
    """How many processes of this multi-process run share this host (`LEARNER_PROCESSES_PER_HOST`,
    default 1: one process per host, as on a pod)."""
    raw = os.environ.get("LEARNER_PROCESSES_PER_HOST", "1")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"LEARNER_PROCESSES_PER_HOST={raw!r}: expected a whole number >= 1")
    return n


def create_sharded_model(
    make: Callable[[], nnx.Module], mesh: Mesh, rules: PartitionRules = DEFAULT_RULES, *,
    placement: str = "auto",
) -> nnx.Module:
    """Initialise a model into its sharded layout, never holding a full copy on one device of a
    mesh of several.

    The weights are built op by op ("device": on the mesh's only device; "host": in host memory,
    then each shard copied to its device; across processes every process builds the same host
    copy from the same seed and places its own shards), so each initializer compiles once per
    distinct shape and the layers' identical shapes share it. One jitted program for the whole
    model ("jit", the fallback for weights larger than half the host's memory) took 7 min 9 s to
    compile for a random 1.5B model on an H100 (28 layers, ~340 outputs; 11.7 s on the CPU
    backend), and more than 2.5 min in each of 2 processes on 2 H200s; the op-by-op build of the
    same model took 4.0 s (docs/benchmarks.md)."""
    abstract = nnx.eval_shape(make)
    graphdef, abstract_state = nnx.split(abstract)
    shardings = tree_shardings(abstract_state, mesh, rules)
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(abstract_state))
    where = init_placement(mesh, state_bytes, placement)
    log.info("building %.2f GB of weights: %s", state_bytes / 1e9, where)
    started = time.perf_counter()
    if where == "jit":
        def init() -> Any:
            return jax.lax.with_sharding_constraint(nnx.state(make()), shardings)

        state = jax.jit(init, out_shardings=shardings)()
    else:
        device = mesh.devices.flat[0] if where == "device" else jax.local_devices(backend="cpu")[0]
        with jax.default_device(device):
            graphdef, state = nnx.split(make())
        state = jax.device_put(state, shardings)
    jax.block_until_ready(state)
    log.info("weights built in %.1f s (%s)", time.perf_counter() - started, where)
    return nnx.merge(graphdef, state)


def shard_model(
    model: nnx.Module, mesh: Mesh, rules: PartitionRules = DEFAULT_RULES
) -> nnx.Module:
    """Move an existing model's state onto `mesh` following `rules` (in place)."""
    state = nnx.state(model)
    nnx.update(model, shard_tree(state, mesh, rules))
    return model
