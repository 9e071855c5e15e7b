"""What each stage reads, built once from the config (`learner.stages.run.open_run`): one frozen
spec per stage (`SFTSpec`, `SelfSupSpec`, `RLSpec`), the stage list, each stage's length and
its global step offset, and the optimizer settings per stage."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from learner.config_check import STAGES as STAGE_ORDER
from learner.config_check import TrainConfigError
from learner.rl.grpo import GRPOConfig
from learner.rl.rewards import RewardRule
from learner.runtime.train_step import OptimizerConfig

STAGE_LABELS = {"init": "initial policy", "sft": "after SFT", "selfsup": "after self-supervised",
                "rl": "after contrastive RL"}


@dataclasses.dataclass(frozen=True)
class StageSpec:
    """What every stage reads."""

    name: str
    steps: int  # optimizer steps of the stage
    offset: int  # global step number before the stage's first step
    optimizer: OptimizerConfig
    checkpoint_every: int
    uses_farm: ClassVar[bool] = True  # scores samples: `learner.train._run_stage` starts the farm first


@dataclasses.dataclass(frozen=True)
class SFTSpec(StageSpec):
    batch_size: int
    uses_farm: ClassVar[bool] = False


@dataclasses.dataclass(frozen=True)
class SelfSupSpec(StageSpec):
    rounds: int
    passes: int  # updates per round over all of the round's successes (steps = rounds x passes)
    samples_per_task: int
    batch_size: int
    reward: RewardRule


@dataclasses.dataclass(frozen=True)
class RLSpec(StageSpec):
    tasks_per_step: int
    group_size: int
    grpo: GRPOConfig
    overlap: str  # "on", "off" or "auto"
    reward: RewardRule
    num_exemplars: int  # earlier kernels shown in each prompt (0: plain GRPO)
    exemplar_rule: str  # "bucket" or "random"
    tau: float  # the bucket rule's temperature


def stage_specs(cfg: Any) -> dict[str, StageSpec]:
    """The configured stages' specs, in pipeline order."""
    offsets = stage_offsets(cfg)
    build = {"sft": _sft_spec, "selfsup": _selfsup_spec, "rl": _rl_spec}
    return {s: build[s](cfg, offsets[s]) for s in stage_list(cfg)}


def _sft_spec(cfg: Any, offset: int) -> SFTSpec:
    return SFTSpec(name="sft", steps=stage_steps(cfg, "sft"), offset=offset,
                   optimizer=optimizer_config(cfg, "sft"), checkpoint_every=int(cfg.sft.checkpoint_every),
                   batch_size=int(cfg.sft.batch_size))


def _selfsup_spec(cfg: Any, offset: int) -> SelfSupSpec:
    c = cfg.selfsup
    return SelfSupSpec(name="selfsup", steps=stage_steps(cfg, "selfsup"), offset=offset,
                       optimizer=optimizer_config(cfg, "selfsup"), checkpoint_every=1,
                       rounds=int(c.rounds), passes=int(c.passes), samples_per_task=int(c.samples_per_task),
                       batch_size=int(c.batch_size), reward=RewardRule("success"))


def _rl_spec(cfg: Any, offset: int) -> RLSpec:
    c = cfg.rl
    return RLSpec(name="rl", steps=stage_steps(cfg, "rl"), offset=offset,
                  optimizer=optimizer_config(cfg, "rl"), checkpoint_every=int(cfg.checkpoint_every),
                  tasks_per_step=int(c.tasks_per_step), group_size=int(c.group_size),
                  grpo=GRPOConfig(**{k: c.grpo[k] for k in c.grpo.keys()}), overlap=str(c.overlap),
                  reward=RewardRule("speedup", float(c.reward_clip)), num_exemplars=int(c.num_exemplars),
                  exemplar_rule=str(c.exemplar_rule), tau=float(c.tau))


def optimizer_config(cfg: Any, stage: str) -> OptimizerConfig:
    """SFT: warmup-stable-decay AdamW with weight decay; selfsup and RL: a constant rate."""
    if stage == "sft":
        c = cfg.sft
        return OptimizerConfig(learning_rate=float(c.learning_rate), warmup_steps=int(c.warmup_steps),
                               weight_decay=float(c.weight_decay), decay_steps=int(c.decay_steps),
                               total_steps=int(c.steps))
    return OptimizerConfig(learning_rate=float(cfg[stage].learning_rate))


def stage_label(cfg: Any, stage: str) -> str:
    if stage == "rl" and int(cfg.rl.num_exemplars) == 0:
        return "after RL (plain GRPO, no exemplars)"
    return STAGE_LABELS[stage]


def stage_list(cfg: Any) -> list[str]:
    stages = [s.strip() for s in str(cfg.stages).split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGE_ORDER]
    if bad or not stages:
        raise TrainConfigError(f"config.stages={cfg.stages!r}: use a comma list of {', '.join(STAGE_ORDER)}")
    if stages != sorted(stages, key=STAGE_ORDER.index) or len(set(stages)) != len(stages):
        raise TrainConfigError(f"config.stages={cfg.stages!r}: stages run in the order {', '.join(STAGE_ORDER)}")
    return stages


def stage_steps(cfg: Any, stage: str) -> int:
    if stage == "sft":
        return int(cfg.sft.steps)
    if stage == "selfsup":
        return int(cfg.selfsup.rounds) * int(cfg.selfsup.passes)
    return int(cfg.rl.steps)


def stage_offsets(cfg: Any) -> dict[str, int]:
    offsets, total = {}, 0
    for s in stage_list(cfg):
        offsets[s] = total
        total += stage_steps(cfg, s)
    return offsets
