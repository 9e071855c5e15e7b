"""Load / save Hugging Face checkpoints (config.json + *.safetensors) for `Transformer`.

Loading reads one tensor at a time (`safetensors.safe_open(framework="numpy")`, bf16 through
ml_dtypes, with a raw-bytes fallback for old safetensors builds), transposes Linear weights
from torch's [out, in] to our [in, out], casts to the param dtype and places each tensor
straight onto its target sharding with `jax.make_array_from_callback`, so no host ever holds more
than one full tensor and no device more than its shard.

Saving gathers one tensor at a time and writes `model.safetensors`, or
`model-0000i-of-0000n.safetensors` + `model.safetensors.index.json` above `max_shard_bytes`.
"""

from __future__ import annotations

import json
import logging
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import ml_dtypes
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
from safetensors import safe_open
from safetensors.numpy import save_file

from learner.lm.config import ModelConfig
from learner.lm.model import Transformer
from learner.lm.sharding import DEFAULT_RULES, PartitionRules, path_to_str, tree_shardings

log = logging.getLogger(__name__)

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
DEFAULT_MAX_SHARD_BYTES = 5 * 1024**3

# Tensors that may appear in HF checkpoints but carry no learned state.
_IGNORED_HF = (re.compile(r"rotary_emb\.inv_freq$"),)

_ST_DTYPES: dict[str, Any] = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
    "BOOL": np.bool_,
}  # fmt: skip


class CheckpointMismatchError(ValueError):
    """A checkpoint tensor is missing or does not fit the model described by config.json."""


# ---------------------------------------------------------------------- name mapping
def hf_name(path: str) -> tuple[str, bool]:
    """Our state path ("layers/3/self_attn/q_proj/kernel") -> (HF tensor name, transpose?)."""
    if path == "embed_tokens/embedding":
        return "model.embed_tokens.weight", False
    if path == "norm/scale":
        return "model.norm.weight", False
    if path == "lm_head/kernel":
        return "lm_head.weight", True
    m = re.fullmatch(r"layers/(\d+)/(.+)/(kernel|bias|scale)", path)
    if not m:
        raise KeyError(f"no HF name for parameter path {path!r}")
    layer, module, leaf = m.groups()
    name = f"model.layers.{layer}.{module.replace('/', '.')}"
    if leaf == "kernel":
        return f"{name}.weight", True
    if leaf == "bias":
        return f"{name}.bias", False
    return f"{name}.weight", False


# ---------------------------------------------------------------------- reading
class SafetensorsReader:
    """Index of tensor name -> file over a single-file or sharded HF checkpoint directory."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        index = self.dir / INDEX_FILE
        if index.is_file():
            weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
            self.files = {name: self.dir / f for name, f in weight_map.items()}
        else:
            candidates = sorted(self.dir.glob("*.safetensors"))
            if not candidates:
                raise FileNotFoundError(f"no *.safetensors in {self.dir}")
            self.files = {}
            for f in candidates:
                with safe_open(str(f), framework="numpy") as h:
                    for name in h.keys():  # noqa: SIM118 - safe_open has no __iter__
                        self.files[name] = f
        for f in set(self.files.values()):
            if not f.is_file():
                raise FileNotFoundError(f"checkpoint shard {f} listed in the index is missing")

    def names(self) -> set[str]:
        return set(self.files)

    def shape(self, name: str) -> tuple[int, ...]:
        with safe_open(str(self.files[name]), framework="numpy") as h:
            return tuple(h.get_slice(name).get_shape())

    def read(self, name: str) -> np.ndarray:
        path = self.files[name]
        try:
            with safe_open(str(path), framework="numpy") as h:
                return h.get_tensor(name)
        except (TypeError, ValueError) as e:  # old builds: no bf16 in the numpy backend
            log.debug("safe_open numpy failed for %s (%s); reading raw bytes", name, e)
            return _read_raw(path, name)


def _read_raw(path: Path, name: str) -> np.ndarray:
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        info = header[name]
        start, end = info["data_offsets"]
        f.seek(8 + header_len + start)
        buf = f.read(end - start)
    return np.frombuffer(buf, dtype=_ST_DTYPES[info["dtype"]]).reshape(info["shape"])


# ---------------------------------------------------------------------- loading
def load_hf_model(
    directory: str | Path,
    *,
    mesh: Mesh | None = None,
    rules: PartitionRules = DEFAULT_RULES,
    **config_overrides: Any,
) -> Transformer:
    """Build a `Transformer` from an HF directory; params land on `mesh` per `rules`
    (or on the default device when no mesh is given).

    `config_overrides` go to `ModelConfig.from_hf_dir` (e.g. param_dtype="bfloat16", remat=True).
    """
    cfg = ModelConfig.from_hf_dir(directory, **config_overrides)
    abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    graphdef, abstract_state = nnx.split(abstract)
    if mesh is not None:
        shardings = tree_shardings(abstract_state, mesh, rules)
    else:
        dev = SingleDeviceSharding(jax.devices()[0])
        shardings = jax.tree.map(lambda _: dev, abstract_state)
    state = load_state(SafetensorsReader(directory), cfg, abstract_state, shardings)
    return nnx.merge(graphdef, state)


def load_state(
    reader: SafetensorsReader, cfg: ModelConfig, abstract_state: Any, shardings: Any
) -> Any:
    """Fill `abstract_state` (ShapeDtypeStruct leaves) tensor by tensor from `reader`."""
    available = reader.names()
    used: set[str] = set()
    flat_abs, treedef = jax.tree_util.tree_flatten_with_path(abstract_state)
    flat_shard = jax.tree_util.tree_leaves(
        shardings, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding)
    )
    leaves = []
    for (path, spec), sharding in zip(flat_abs, flat_shard, strict=True):
        ppath = path_to_str(path)
        name, transpose = hf_name(ppath)
        if name not in available:
            raise CheckpointMismatchError(
                f"tensor {name!r} (for {ppath}, expected shape {_hf_shape(spec.shape, transpose)})"
                f" is missing from {reader.dir}"
            )
        arr = reader.read(name)
        if transpose:
            arr = arr.T
        if tuple(arr.shape) != tuple(spec.shape):
            raise CheckpointMismatchError(
                f"tensor {name!r} has shape {tuple(arr.T.shape if transpose else arr.shape)}, "
                f"but config.json implies {_hf_shape(spec.shape, transpose)} (for {ppath})"
            )
        arr = np.ascontiguousarray(arr.astype(spec.dtype, copy=False))
        leaves.append(_place(arr, sharding))
        used.add(name)
    unused = sorted(
        n for n in available - used if not any(p.search(n) for p in _IGNORED_HF)
    )
    if unused:
        if cfg.tie_word_embeddings and unused == ["lm_head.weight"]:
            log.warning("ignoring lm_head.weight: config says tie_word_embeddings=True")
        else:
            raise CheckpointMismatchError(
                f"checkpoint has tensors the model does not use: {unused[:10]}"
                + (" ..." if len(unused) > 10 else "")
            )
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _hf_shape(shape: tuple[int, ...], transpose: bool) -> tuple[int, ...]:
    return tuple(reversed(shape)) if transpose else tuple(shape)


def _place(arr: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
    if isinstance(sharding, NamedSharding | SingleDeviceSharding) and sharding.is_fully_addressable:
        return jax.device_put(arr, sharding)
    return jax.make_array_from_callback(arr.shape, sharding, lambda idx: arr[idx])


# ---------------------------------------------------------------------- saving
def iter_hf_tensors(model: Transformer, dtype: Any | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (HF name, host numpy array) one parameter at a time."""
    state = nnx.state(model, nnx.Param)
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        name, transpose = hf_name(path_to_str(path))
        arr = _to_host(leaf)
        if transpose:
            arr = arr.T
        if dtype is not None:
            arr = arr.astype(dtype)
        yield name, np.ascontiguousarray(arr)


def _to_host(x: jax.Array) -> np.ndarray:
    if jax.process_count() > 1 and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))


def save_hf_model(
    model: Transformer,
    directory: str | Path,
    *,
    dtype: str | None = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> list[Path]:
    """Write config.json + safetensors (sharded with an index above `max_shard_bytes`).

    `dtype` ("bfloat16"/"float32"; default: the param dtype) is the on-disk tensor dtype.
    Only process 0 writes; all processes must call this (gathers are collective).
    Returns the written safetensors files.
    """
    from learner.lm.config import dtype_from_name

    cfg = model.cfg
    out_dtype = np.dtype(dtype_from_name(dtype or cfg.param_dtype))
    directory = Path(directory)
    writer = jax.process_index() == 0
    if writer:
        directory.mkdir(parents=True, exist_ok=True)
    hf_cfg = cfg.to_hf_dict()
    hf_cfg["torch_dtype"] = "bfloat16" if out_dtype == np.dtype(ml_dtypes.bfloat16) else str(
        out_dtype
    )
    # Plan shards from shapes first so tensors can be streamed out one shard at a time.
    state = nnx.state(model, nnx.Param)
    plan: list[list[str]] = [[]]
    sizes = [0]
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        name, _ = hf_name(path_to_str(path))
        nbytes = int(np.prod(leaf.shape)) * out_dtype.itemsize
        if sizes[-1] and sizes[-1] + nbytes > max_shard_bytes:
            plan.append([])
            sizes.append(0)
        plan[-1].append(name)
        sizes[-1] += nbytes
    n = len(plan)
    fnames = [SINGLE_FILE] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    shard_of = {name: i for i, names in enumerate(plan) for name in names}
    if writer:
        (directory / "config.json").write_text(json.dumps(hf_cfg, indent=2, sort_keys=True))
    files: list[Path] = []
    current: dict[str, np.ndarray] = {}
    current_idx = 0
    for name, arr in iter_hf_tensors(model, out_dtype):
        if shard_of[name] != current_idx:
            files += _write_shard(writer, directory / fnames[current_idx], current)
            current, current_idx = {}, shard_of[name]
        current[name] = arr
    files += _write_shard(writer, directory / fnames[current_idx], current)
    if writer and n > 1:
        weight_map = {name: fnames[i] for name, i in shard_of.items()}
        index = {"metadata": {"total_size": int(sum(sizes))}, "weight_map": dict(sorted(weight_map.items()))}
        (directory / INDEX_FILE).write_text(json.dumps(index, indent=2))
    log.info("wrote %d safetensors file(s) to %s", n, directory)
    return files


def _write_shard(writer: bool, path: Path, tensors: dict[str, np.ndarray]) -> list[Path]:
    if not writer or not tensors:
        return []
    save_file(tensors, str(path), metadata={"format": "pt"})
    return [path]
