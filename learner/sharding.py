"""Device mesh ("data", "fsdp", "tensor") and regex partition rules applied by parameter path.

The same rules shard model params, optimizer state (whose paths end with the param path) and
anything else addressed by path. A rule's PartitionSpec axis is dropped for a dimension it does
not divide evenly, so one rule set works for every model size and every mesh, including 1 device.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
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


def create_sharded_model(
    make: Callable[[], nnx.Module], mesh: Mesh, rules: PartitionRules = DEFAULT_RULES
) -> nnx.Module:
    """Initialise a model directly into its sharded layout (no full copy on one device)."""
    abstract = nnx.eval_shape(make)
    graphdef, abstract_state = nnx.split(abstract)
    shardings = tree_shardings(abstract_state, mesh, rules)

    @jax.jit
    def init() -> Any:
        state = nnx.state(make())
        return jax.lax.with_sharding_constraint(state, shardings)

    state = jax.jit(init, out_shardings=shardings)()
    return nnx.merge(graphdef, state)


def shard_model(
    model: nnx.Module, mesh: Mesh, rules: PartitionRules = DEFAULT_RULES
) -> nnx.Module:
    """Move an existing model's state onto `mesh` following `rules` (in place)."""
    state = nnx.state(model)
    nnx.update(model, shard_tree(state, mesh, rules))
    return model
