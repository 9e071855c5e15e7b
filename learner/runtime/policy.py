"""The initial policy: a tokenizer, a mesh and a model, from a pretrained HF directory or scratch.

``config.model.hf_dir`` set: the pretrained checkpoint and its own tokenizer, loaded straight onto
the mesh. Empty: a randomly initialised model of the configured shape and a byte-level BPE
fitted to the task suite (`learner.lm.vocab`), which is what the CPU demo trains.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh

from learner.lm.config import ModelConfig
from learner.lm.hf_io import load_hf_model
from learner.lm.model import Transformer
from learner.lm.sharding import MeshConfig, create_sharded_model, make_mesh
from learner.lm.tokenizer import Tokenizer
from learner.lm.vocab import train_tokenizer
from learner.runtime import controller

log = logging.getLogger(__name__)


class PolicyReleasedError(RuntimeError):
    """The initial weights were handed to the first stage; the policy keeps only their shapes."""


@dataclasses.dataclass
class Policy:
    """The tokenizer, the mesh, the model's structure, and its initial weights until a stage takes
    them: afterwards the policy holds only their shapes, dtypes and shardings (`abstract_params`),
    which is what checkpoint restores and samplers need, so no copy of the weights stays on the
    devices for the rest of the run."""

    tokenizer: Tokenizer
    model_config: ModelConfig
    mesh: Mesh
    graphdef: Any
    _params: Any  # the initial weights, or jax.ShapeDtypeStruct leaves once released
    _released: bool = False

    @classmethod
    def from_model(cls, tokenizer: Tokenizer, model_config: ModelConfig, mesh: Mesh, model: Transformer) -> Policy:
        graphdef, params = nnx.split(model)
        return cls(tokenizer=tokenizer, model_config=model_config, mesh=mesh, graphdef=graphdef, _params=params)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id if self.tokenizer.pad_id is not None else 0

    @property
    def holds_weights(self) -> bool:
        return not self._released

    @property
    def abstract_params(self) -> Any:
        """The weights' shapes, dtypes and shardings (no arrays)."""
        return jax.tree.map(_abstract_leaf, self._params)

    @property
    def model(self) -> Transformer:
        """The initial model (its weights are shared, not copied); only while the policy holds them."""
        if self._released:
            raise PolicyReleasedError("the initial weights were handed to the first stage and freed; "
                                      "restore a stage checkpoint instead (learner.stages.state.load_stage_params)")
        return nnx.merge(self.graphdef, self._params)

    def take_params(self) -> Any:
        """The initial weights, once: the caller owns them (a training step may donate their buffers)
        and the policy keeps only their shapes."""
        if self._released:
            raise PolicyReleasedError("the initial weights were already handed to a stage")
        params = self._params
        self.release()
        return params

    def release(self) -> None:
        """Keep only the weights' shapes (idempotent): the arrays go once nothing else holds them."""
        if not self._released:
            self._params = self.abstract_params
            self._released = True


def _abstract_leaf(x: Any) -> Any:
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))


def _jax_overrides(m: Any) -> dict[str, Any]:
    return dict(param_dtype=m.param_dtype, compute_dtype=m.compute_dtype,
                attention_impl=m.attention_impl, remat=bool(m.remat))


def build_policy(cfg: Any, workdir: Path, corpus: Iterable[str]) -> Policy:
    """`cfg` is the run's ConfigDict; `corpus` feeds the scratch tokenizer."""
    mesh = make_mesh(MeshConfig(data=cfg.mesh.data, fsdp=cfg.mesh.fsdp, tensor=cfg.mesh.tensor))
    m = cfg.model
    if m.hf_dir:
        tokenizer = Tokenizer.from_dir(m.hf_dir)
        model = load_hf_model(m.hf_dir, mesh=mesh, **_jax_overrides(m))
        model_cfg = model.cfg
        log.info("loaded %s (%.1fM params)", m.hf_dir, model_cfg.num_params() / 1e6)
    else:
        corpus = list(corpus)
        # process 0 fits and writes it, the others then read it (no two writers of one file)
        controller.share("tokenizer", lambda: train_tokenizer(corpus, m.vocab_size, workdir / "tokenizer").vocab_size)
        tokenizer = train_tokenizer(corpus, m.vocab_size, workdir / "tokenizer")
        model_cfg = ModelConfig(
            vocab_size=tokenizer.vocab_size, hidden_size=m.hidden_size,
            intermediate_size=m.intermediate_size, num_layers=m.num_layers, num_heads=m.num_heads,
            num_kv_heads=m.num_kv_heads, head_dim=m.hidden_size // m.num_heads,
            model_type="qwen2", qkv_bias=True, tie_word_embeddings=True,
            max_position_embeddings=cfg.max_seq_len, eos_token_id=tokenizer.eos_ids[0],
            pad_token_id=tokenizer.pad_id, **_jax_overrides(m),
        )
        seed = int(cfg.seed)
        model = create_sharded_model(lambda: Transformer(model_cfg, rngs=nnx.Rngs(seed)), mesh)
        log.info("initialised a %.2fM-parameter model from scratch", model_cfg.num_params() / 1e6)
    if not tokenizer.eos_ids:
        raise ValueError("the tokenizer has no EOS token; generation could never stop early")
    log.info("devices: %s", ", ".join(sorted({d.platform for d in jax.devices()})))
    return Policy.from_model(tokenizer, model_cfg, mesh, model)
