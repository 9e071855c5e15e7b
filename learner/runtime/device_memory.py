"""A per-device memory plan of a training run, printed at start; a config that cannot fit is refused.

    python -m learner.runtime.device_memory --model qwen2.5-7b --hardware h200 --devices 8 \
        --config configs/gpu_cluster.py
    python -m learner.runtime.device_memory --model qwen2.5-7b --hardware v5p --devices 4 \
        --config configs/tpu_pod.py

Each line is bytes per device, with the knob that shrinks it:

* params, gradients, optimizer state (AdamW mu + nu): sharded over every mesh axis their rules
  split (fsdp x tensor), in `model.param_dtype` (the initial weights are handed to the first stage,
  not kept beside it);
* reference policy (GRPO KL term): a copy of the weights in `rl.reference_dtype`, sharded like the
  params (none when `rl.grpo.kl_coef` = 0);
* rollout copy: weight matrices in the compute dtype, replicated over the batch axes and split
  over "tensor" (`learner.lm.sampler.ROLLOUT_RULES`);
* KV cache: `sampling.batch_size` rows split over the batch axes, cache length
  bucket(max_seq_len), k and v for every layer, kv heads split over "tensor";
* activations of one micro-batch (`train.micro_batch_tokens` tokens over the batch axes): with
  `model.remat` each layer keeps its input [tokens, d] and one layer's working set is live;
  without it every layer keeps its working set; plus one chunk of LM-head logits.

It is an estimate from shapes (XLA's buffer reuse and fusion change the real peak by some 10-20%);
`headroom` (default 0.9) is the fraction of device memory the plan may use.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from learner.lm.config import ModelConfig

GB = 1e9

# Memory per device in bytes (as the vendor states it) of the devices the plan knows by name.
HARDWARE_BYTES: dict[str, float] = {
    "h100": 80e9,
    "h200": 141e9,
    "a100": 80e9,
    "v5p": 95e9,  # per chip; a v5p-8 slice has 4 chips
    "v5e": 16e9,
    "v6e": 32e9,
}

# Shapes of the checkpoints researchers bring (HF config.json values).
MODEL_SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                         num_layers=28, num_heads=12, num_kv_heads=2, head_dim=128,
                         tie_word_embeddings=True),
    "qwen2.5-7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                       num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128,
                       tie_word_embeddings=False),
}


class MemoryPlanError(ValueError):
    """The configured run does not fit in device memory; the message names the knob to turn."""


def model_shape(name: str, **overrides: Any) -> ModelConfig:
    if name not in MODEL_SHAPES:
        raise ValueError(f"unknown model shape {name!r}; expected one of {sorted(MODEL_SHAPES)}")
    kw = dict(MODEL_SHAPES[name], model_type="qwen2", qkv_bias=True)
    kw.update(overrides)
    return ModelConfig(**kw)


@dataclasses.dataclass(frozen=True)
class PlanInputs:
    """What the plan depends on, read from a run config by `PlanInputs.from_config`."""

    data: int
    fsdp: int
    tensor: int
    param_dtype: str = "float32"
    compute_dtype: str = "bfloat16"
    reference_dtype: str | None = "bfloat16"  # None: no reference copy (kl_coef = 0)
    remat: bool = True
    micro_batch_tokens: int = 16384  # tokens of one micro-batch over the whole mesh
    max_seq_len: int = 8192
    rollout_rows: int = 64  # sampling.batch_size
    loss_chunk: int = 512

    @property
    def devices(self) -> int:
        return self.data * self.fsdp * self.tensor

    @classmethod
    def from_config(cls, cfg: Any, devices: int) -> PlanInputs:
        from learner.lm.sharding import MeshConfig

        data, fsdp, tensor = MeshConfig(cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor).resolve(devices)
        kl = float(cfg.rl.grpo.kl_coef) > 0 and "rl" in str(cfg.stages)
        mbt = int(cfg.train.micro_batch_tokens) if "train" in cfg else 0
        rows = max(int(cfg.sft.batch_size), int(cfg.selfsup.batch_size),
                   int(cfg.rl.tasks_per_step) * int(cfg.rl.group_size))
        return cls(
            data=data, fsdp=fsdp, tensor=tensor, param_dtype=str(cfg.model.param_dtype),
            compute_dtype=str(cfg.model.compute_dtype),
            reference_dtype=(_resolve_dtype(str(cfg.rl.reference_dtype),
                                            str(cfg.model.compute_dtype)) if kl else None),
            remat=bool(cfg.model.remat), max_seq_len=int(cfg.max_seq_len),
            micro_batch_tokens=mbt or rows * int(cfg.max_seq_len),
            rollout_rows=int(cfg.sampling.batch_size),
        )  # fmt: skip


# Below this many rollout rows per data-parallel device, a decode step is mostly the read of the
# replicated rollout weights, which more devices do not shorten (docs/benchmarks.md, "The
# rollout's decode step against its rows": 1.5B on an H100, 1.82 ms + 35 us per row).
EFFICIENT_ROLLOUT_ROWS_PER_DEVICE = 64


def rollout_rows_note(inputs: PlanInputs) -> str | None:
    """A note for the start-up log when the rollout gives each data-parallel device few rows; None
    otherwise."""
    replicas = inputs.data * inputs.fsdp  # the rollout's rows go over both data axes
    if replicas <= 1:
        return None
    per_device = inputs.rollout_rows / replicas
    if per_device >= EFFICIENT_ROLLOUT_ROWS_PER_DEVICE:
        return None
    return (f"rollout: {inputs.rollout_rows} rows (sampling.batch_size) over {replicas} data-parallel devices "
            f"is {per_device:g} per device; below {EFFICIENT_ROLLOUT_ROWS_PER_DEVICE} a decode step is mostly "
            f"the read of the replicated weights, so these devices shorten the rollout little. More rows: "
            f"sampling.batch_size, up to rl.tasks_per_step x rl.group_size (the KV cache grows with "
            f"it); or split the rollout weights with mesh.tensor")


def _resolve_dtype(name: str, compute_dtype: str) -> str:
    return compute_dtype if name == "compute" else name


@dataclasses.dataclass(frozen=True)
class PlanLine:
    name: str
    bytes_per_device: float
    knob: str


@dataclasses.dataclass
class MemoryPlan:
    lines: list[PlanLine]
    device_bytes: float
    headroom: float
    inputs: PlanInputs
    model: ModelConfig

    @property
    def total(self) -> float:
        return sum(x.bytes_per_device for x in self.lines)

    @property
    def budget(self) -> float:
        return self.device_bytes * self.headroom

    @property
    def fits(self) -> bool:
        return self.total <= self.budget

    def format(self, title: str = "") -> str:
        i = self.inputs
        head = title or "memory plan"
        mem = ("device memory unknown (plan not enforced)" if math.isinf(self.device_bytes) else
               f"{self.device_bytes / GB:.0f} GB each, plan budget {self.budget / GB:.1f} GB")
        out = [f"{head}: {self.model.num_params() / 1e9:.2f}B params on {i.devices} devices "
               f"(data={i.data} fsdp={i.fsdp} tensor={i.tensor}), {mem}"]
        out.append(f"  {'item':<28}{'GB/device':>10}   knob")
        for x in self.lines:
            out.append(f"  {x.name:<28}{x.bytes_per_device / GB:>10.2f}   {x.knob}")
        verdict = "fits" if self.fits else "DOES NOT FIT"
        out.append(f"  {'total':<28}{self.total / GB:>10.2f}   {verdict}")
        return "\n".join(out)

    def check(self) -> None:
        """Raise `MemoryPlanError` naming the largest item's knob when the plan does not fit."""
        if self.fits:
            return
        worst = max(self.lines, key=lambda x: x.bytes_per_device)
        raise MemoryPlanError(
            f"the run needs ~{self.total / GB:.1f} GB per device but {self.budget / GB:.1f} GB are "
            f"available ({self.headroom:.0%} of {self.device_bytes / GB:.0f} GB); the largest item "
            f"is {worst.name} ({worst.bytes_per_device / GB:.1f} GB): {worst.knob}\n"
            + self.format())


def _nbytes(dtype: str) -> int:
    return jnp.dtype(dtype).itemsize


def _cache_len(max_seq_len: int) -> int:
    from learner.lm.sampler import bucket_length

    return bucket_length(max_seq_len, None, 16)


def plan_memory(model: ModelConfig, inputs: PlanInputs, device_bytes: float,
                headroom: float = 0.9) -> MemoryPlan:
    i = inputs
    n_params = model.num_params()
    shards = i.fsdp * i.tensor  # params are replicated over "data"
    pb, cb = _nbytes(i.param_dtype), _nbytes(i.compute_dtype)
    lines = [
        PlanLine("params", n_params * pb / shards, "mesh.fsdp (more devices) or model.param_dtype"),
        PlanLine("gradients", n_params * pb / shards, "mesh.fsdp (more devices) or model.param_dtype"),
        PlanLine("optimizer (AdamW mu, nu)", 2 * n_params * pb / shards,
                 "mesh.fsdp (more devices) or model.param_dtype"),
    ]
    # No copy of the initial policy: the first stage takes its weights over, and checkpoint
    # restores fill abstract templates (learner.runtime.policy, learner.stages.state.template).
    if i.reference_dtype:
        lines.append(PlanLine("reference policy", n_params * _nbytes(i.reference_dtype) / shards,
                              "rl.grpo.kl_coef=0 drops it; mesh.fsdp shards it"))
    lines.append(PlanLine("rollout copy", n_params * cb / i.tensor,
                          "mesh.tensor (splits the rollout weights)"))
    batch_shards = i.data * i.fsdp
    rows = math.ceil(i.rollout_rows / batch_shards)
    kv_heads = model.num_kv_heads / i.tensor if model.num_kv_heads % i.tensor == 0 else model.num_kv_heads
    kv = 2 * model.num_layers * rows * kv_heads * _cache_len(i.max_seq_len) * model.head_dim * cb
    lines.append(PlanLine("KV cache", kv, "sampling.batch_size or sampling.max_new_tokens / max_seq_len"))
    tok = i.micro_batch_tokens / batch_shards
    d, f = model.hidden_size, model.intermediate_size
    h_dim, kv_dim = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    f_t = f / i.tensor if f % i.tensor == 0 else f
    # One layer's live working set (compute dtype): norms, q/k/v, attention out, gate/up/act.
    # Attention itself is fused (cuDNN) or chunked; its P x P scores are not counted.
    layer = tok * cb * (4 * d + (h_dim + 2 * kv_dim) / i.tensor + h_dim / i.tensor + 3 * f_t)
    saved = tok * d * cb * model.num_layers if i.remat else layer * model.num_layers
    # LM head: one [rows, chunk, V] float32 block of logits, its softmax and its gradient.
    rows_mb = max(1.0, i.micro_batch_tokens / i.max_seq_len / batch_shards)
    logits = 3 * rows_mb * i.loss_chunk * model.vocab_size * 4
    lines.append(PlanLine("activations / micro-batch", saved + layer + logits,
                          "train.micro_batch_tokens (smaller micro-batches) or model.remat=True"))
    return MemoryPlan(lines, device_bytes, headroom, i, model)


def device_memory_bytes() -> float | None:
    """Memory of the first local device as the runtime reports it (None on CPU)."""
    import jax

    try:
        stats = jax.local_devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001 - backends without memory stats
        return None
    limit = stats.get("bytes_limit")
    return float(limit) if limit else None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m learner.runtime.device_memory", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-7b", choices=sorted(MODEL_SHAPES))
    p.add_argument("--hardware", default="h200", choices=sorted(HARDWARE_BYTES))
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--config", default="configs/gpu_cluster.py", help="a run config file")
    p.add_argument("--headroom", type=float, default=0.9)
    args = p.parse_args(argv)
    from learner.config_check import load_config_file

    cfg = load_config_file(args.config)
    model = model_shape(args.model, param_dtype=str(cfg.model.param_dtype),
                        compute_dtype=str(cfg.model.compute_dtype))
    plan = plan_memory(model, PlanInputs.from_config(cfg, args.devices),
                       HARDWARE_BYTES[args.hardware], args.headroom)
    print(plan.format(f"{args.model} on {args.devices}x {args.hardware} ({args.config})"))
    return 0 if plan.fits else 1


if __name__ == "__main__":
    raise SystemExit(main())
