"""The trainer: SFT, self-supervised and contrastive-RL stages over the farm, resumable.

    python -m learner train --config configs/demo.py [--config.rl.group_size=8 ...]

The flow, top-down (this module reads in that order):

1. `train(cfg)` checks the stage list, initializes multi-host JAX, and opens the run
   (`open_run`: workdir, tokenizer and policy, task set, exemplar database, metrics, and one
   frozen spec per stage built from the config: `SFTSpec`, `SelfSupSpec`, `RLSpec`).
2. `measure_known_programs` scores the task set's known programs on the farm once (with
   `sft.measure_targets`): their speedups seed the exemplar buckets and the frozen exemplars.
3. each configured stage runs through `_run_stage`: skip it when its last checkpoint is final,
   else restore (or start) its state, drop exemplar rows newer than that checkpoint, start the
   farm when the stage scores samples, and call the stage's function from `STAGES`:

   * sft      masked cross-entropy on (prompt, correct code) pairs.
   * selfsup  sample codes for every task, score them on the farm, train only on the successes
              (reward 1/0, no baseline); `rounds` x (sample, score, `passes` updates over all of
              the round's successes; the paper's one update per round is `passes = 1`).
   * rl       contrastive RL: each task's prompt carries `num_exemplars` earlier kernels drawn
              from its score buckets with their speedups; `group_size` responses per prompt are
              scored and every success enters the buckets; GRPO update with a KL penalty to the
              stage's starting policy. With `overlap`, the sampler produces step t+1 while the
              farm scores step t (the importance ratio uses the behaviour log-probs).

   then evaluates the stage's final policy (`_eval_stage`) under every configured prompt form.
4. `final_report` writes the report over the stages' evaluations.

One jitted step (`learner.runtime.train_step`) with a pluggable loss serves every stage. `rewards`
owns the outcome-to-reward rule (INFRA_ERROR and LOST are left out of the update).

Steps are numbered globally across the pipeline (stage offsets follow from the config), and
every scored sample is stored in the exemplar database with the global step that consumed it.
Resuming restores each stage's latest checkpoint and deletes database rows newer than it, so
the database always matches the weights; sample ids are deterministic, so nothing is counted
twice.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import jax
import numpy as np
from flax import nnx
from tqdm import tqdm

from learner.config_check import STAGES as STAGE_ORDER
from learner.config_check import TrainConfigError, resume_conflicts, validate_config
from learner.lm.engine import ContinuousSampler
from learner.lm.sampler import Sampler, SamplingConfig
from learner.report.metrics import MetricsWriter
from learner.report.speedups import SpeedupSummary, format_table, summarize, write_report
from learner.report.stage_notes import stage_notes
from learner.rl.exemplars import ExemplarDB, SampleRecord, code_sha256, sample_random_exemplars
from learner.rl.farm import Farm, FarmOutcome, FarmSettings, Outcome, one_model_per_group
from learner.rl.grpo import GRPOConfig, group_advantages, make_grpo_loss
from learner.rl.prompts import PROMPT_VERSION, Exemplar, contrastive_prompt, sft_prompt
from learner.rl.reference import batch_reference_logprobs, reference_copy, reference_dtype
from learner.rl.rollout import (
    LengthGroupedSampler,
    Prompt,
    Rollout,
    generate_rollouts,
    grpo_batch,
    lm_batch,
    repeat_prompt,
)
from learner.rl.tasks import (
    Program,
    SFTPair,
    TaskInfo,
    builtin_sources,
    exemplars_for_sft,
    load_task_set,
    read_jsonl_pairs,
    resolve_task_ids,
    sft_pairs_for,
    task_programs,
)
from learner.runtime import compile_cache, scale
from learner.runtime.checkpoint import Checkpointer
from learner.runtime.distributed import distributed_config, maybe_initialize_distributed
from learner.runtime.losses import lm_loss_sum_count
from learner.runtime.policy import Policy, build_policy
from learner.runtime.train_step import (
    OptimizerConfig,
    TrainState,
    abstract_train_state,
    create_train_state,
    learning_rate_schedule,
    make_optimizer,
)

log = logging.getLogger(__name__)


def train(cfg: Any) -> dict[str, Path]:
    """Run (or resume) the configured pipeline; returns the report's paths."""
    stage_list(cfg)  # a bad stage list is refused before anything starts
    maybe_initialize_distributed(distributed_config(cfg))
    run = open_run(cfg)
    try:
        measure_known_programs(run)  # once, before any stage: they seed the exemplar buckets
        for spec in run.specs.values():
            _run_stage(run, spec)
        return final_report(run, run.stages)
    finally:
        run.close()


def _run_stage(run: Run, spec: StageSpec) -> None:
    """Run one stage from its latest checkpoint (or its start) to its last step, then evaluate it."""
    if stage_done(run, spec.name):
        run.policy.release()  # the initial weights start only the first stage
        log.info("stage %s already complete", spec.name)
        if _eval_pending(run, spec.name):  # restore the params only when they are needed
            _eval_stage(run, spec.name, _final_params(run, spec.name))
        return
    state, reference, restored = _stage_state(run, spec.name, run.stages)
    run.policy.release()  # handed to this stage, or not needed: later stages start from checkpoints
    dropped = run.db.truncate_after(spec.offset + restored)
    if dropped:
        log.info("resume: dropped %d database rows newer than the checkpoint", dropped)
    log.info("stage %s: step %d of %d", spec.name, restored, spec.steps)
    if spec.uses_farm:
        run.start_farm()
    state = STAGES[spec.name](run, spec, state, reference, restored)
    del reference
    if _eval_pending(run, spec.name):
        _eval_stage(run, spec.name, state.params)


# ---------------------------------------------------------------------------------------
# the stages: (run, spec, state, RL's reference params or None, step restored) -> final state


def run_sft(run: Run, spec: SFTSpec, state: TrainState, reference: Any, start: int) -> TrainState:
    """`spec.steps` AdamW steps on batches of (prompt, known program) pairs of one padded length."""
    rows = _sft_rows(run)
    log.info("SFT on %d pairs for %d steps", len(rows), spec.steps)
    lr_at = learning_rate_schedule(spec.optimizer)
    loss_fn = _lm_loss()
    batches = LengthGroupedSampler([len(p) + len(c) for p, c in rows], spec.batch_size, int(run.cfg.max_seq_len))
    with _checkpointer(run, spec.name) as ck, _progress(run, spec.steps, start, spec.name) as bar:
        for step in range(start, spec.steps):
            state, m = _sft_step(run, spec, state, rows, batches, step, loss_fn)
            m["learning_rate"] = float(lr_at(step))
            run.writer.write(spec.offset + step + 1, m, stage=spec.name)
            bar.set_postfix(loss=f"{m['loss']:.3f}")
            bar.update(1)
            if (step + 1) % 10 == 0 and not run.cfg.progress:
                log.info("sft step %d/%d loss %.4f (%.2fs/step)", step + 1, spec.steps, m["loss"], m["step_s"])
            _save(ck, state, spec.checkpoint_every, spec.steps)
    return state


def run_selfsup(run: Run, spec: SelfSupSpec, state: TrainState, reference: Any, start: int) -> TrainState:
    """`spec.rounds` rounds of `spec.passes` steps each: sample, score, update on the successes."""
    sampler = _sampler(run, state.params)
    loss_fn = _lm_loss()
    k = spec.passes
    with _checkpointer(run, spec.name) as ck, _progress(run, spec.rounds, start // k, spec.name) as bar:
        for rnd in range(start // k, spec.rounds):
            state, m = _selfsup_round(run, spec, state, sampler, rnd, loss_fn)
            run.writer.write(spec.offset + rnd * k + k, m, stage=spec.name)
            bar.set_postfix(success=f"{m['success_rate']:.2f}")
            bar.update(1)
            _save(ck, state, spec.checkpoint_every, spec.steps)
    return state


def run_rl(run: Run, spec: RLSpec, state: TrainState, reference: Any, start: int) -> TrainState:
    """`spec.steps` GRPO steps. `reference`: the frozen reference policy (`_stage_state`), None
    when rl.grpo.kl_coef is 0. With overlap, step t+1's samples are drawn while the farm scores
    step t's."""
    loss_fn = make_grpo_loss(spec.grpo)
    sampler = _sampler(run, state.params)
    overlap = _rl_overlap(run, spec)
    pending: _Batch | None = None
    with _checkpointer(run, spec.name) as ck, _progress(run, spec.steps, start, spec.name) as bar:
        for step in range(start, spec.steps):
            gstep = spec.offset + step
            version = spec.offset + int(jax.device_get(state.step))
            batch = pending if pending is not None else _rl_generate(run, spec, sampler, gstep, version)
            pending = None
            if overlap and step + 1 < spec.steps:  # the sampler works while the farm scores `batch`
                pending = _rl_generate(run, spec, sampler, gstep + 1, version)
            state, m = _rl_update(run, spec, state, reference, batch, gstep, version, sampler, loss_fn)
            run.writer.write(gstep + 1, m, stage=spec.name)
            bar.set_postfix(success=f"{m['success_rate']:.2f}", reward=f"{m['reward_mean']:.2f}")
            bar.update(1)
            _save(ck, state, spec.checkpoint_every, spec.steps)
    if pending is not None:  # pragma: no cover - only when the loop exits early
        run.farm.wait(pending.ids, 60.0)
    return state


StageFn = Callable[["Run", Any, TrainState, Any, int], TrainState]  # spec: the stage's own StageSpec
STAGES: dict[str, StageFn] = {"sft": run_sft, "selfsup": run_selfsup, "rl": run_rl}  # in pipeline order
STAGE_LABELS = {"init": "initial policy", "sft": "after SFT", "selfsup": "after self-supervised",
                "rl": "after contrastive RL"}


# ---------------------------------------------------------------------------------------
# stage specs: what each stage reads, built once from the config (`open_run`)


@dataclasses.dataclass(frozen=True)
class RewardRule:
    """How a stage turns farm outcomes into rewards (see `rewards`)."""

    kind: str  # a key of REWARD_KINDS
    clip: float = 0.0  # "speedup": the largest reward


@dataclasses.dataclass(frozen=True)
class StageSpec:
    """What every stage reads."""

    name: str
    steps: int  # optimizer steps of the stage
    offset: int  # global step number before the stage's first step
    optimizer: OptimizerConfig
    checkpoint_every: int
    uses_farm: ClassVar[bool] = True  # scores samples: `_run_stage` starts the farm first


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


# ---------------------------------------------------------------------------------------
# the run: what every stage shares

@dataclasses.dataclass
class Run:
    """What every stage shares: config, stage specs, policy, tasks, farm, database, metrics."""

    cfg: Any  # the whole config
    specs: dict[str, StageSpec]  # the configured stages, in pipeline order
    workdir: Path
    policy: Policy
    tasks: list[TaskInfo]
    db: ExemplarDB
    writer: MetricsWriter
    farm_factory: Callable[[], Farm]
    heldout: frozenset[str] = frozenset()  # task ids kept out of RL (evaluated only)
    measured: dict[str, float] = dataclasses.field(default_factory=dict)  # code sha -> speedup
    _farm: Farm | None = None
    _known: list[Program] | None = None

    @property
    def stages(self) -> list[str]:
        return list(self.specs)

    @property
    def rl_tasks(self) -> list[TaskInfo]:
        return [t for t in self.tasks if t.task_id not in self.heldout]

    @property
    def farm(self) -> Farm:
        """The running farm (`start_farm` starts it)."""
        if self._farm is None:
            raise RuntimeError("the farm is not started: call Run.start_farm() first")
        return self._farm

    def start_farm(self) -> Farm:
        """Start the farm (local daemons, or a client of `farm.endpoints`) unless it runs already."""
        if self._farm is None:
            self._farm = self.farm_factory()
        return self._farm

    @property
    def task_by_id(self) -> dict[str, TaskInfo]:
        return {t.task_id: t for t in self.tasks}

    @property
    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    def encode_prompt(self, text: str) -> list[int]:
        """Through the checkpoint's chat template when it has one (model.chat_template="auto")."""
        return self.tokenizer.encode_prompt(text, chat=str(self.cfg.model.chat_template) != "off")

    def encode_completion(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_ids[0]]

    def sampling(self, temperature: float | None = None) -> SamplingConfig:
        s = self.cfg.sampling
        return SamplingConfig(
            max_new_tokens=int(s.max_new_tokens),
            temperature=float(s.temperature if temperature is None else temperature),
            top_p=float(s.top_p), eos_ids=tuple(self.tokenizer.eos_ids),
        )

    def max_prompt_len(self) -> int:
        return int(self.cfg.max_seq_len) - int(self.cfg.sampling.max_new_tokens)

    def close(self) -> None:
        if self._farm is not None:
            self._farm.close()
            self._farm = None
        self.writer.close()
        self.db.close()


def open_run(cfg: Any, *, record_config: bool = True) -> Run:
    """Open (or reopen) the run in `cfg.workdir`: refuse a resume under an incompatible config,
    record the config, build the policy and the stage specs. Starts no farm (`Run.start_farm`)."""
    validate_config(cfg)
    specs = stage_specs(cfg)
    workdir = Path(cfg.workdir)
    recorded = workdir / "config.json"
    if record_config and recorded.is_file() and (workdir / "ckpt").is_dir():
        problems = resume_conflicts(json.loads(recorded.read_text()), cfg)
        if problems and not cfg.resume_force:
            raise TrainConfigError(
                f"{workdir} holds a run with a different config: " + "; ".join(problems)
                + ". Resuming would mix incompatible steps and exemplar rows: use a new workdir, "
                "or --config.resume_force=True to resume anyway")
        for p in problems:
            log.warning("resume_force: %s", p)
    workdir.mkdir(parents=True, exist_ok=True)
    compile_cache.enable(cfg.jax_cache_dir, workdir)  # before the first compilation (build_policy)
    if record_config:
        recorded.write_text(cfg.to_json_best_effort(indent=1))
    tasks = load_task_set(cfg.tasks.suite, cfg.tasks.ids)
    heldout = frozenset(heldout_ids(cfg, tasks))
    policy = build_policy(cfg, workdir, _corpus(tasks))
    scale.run_memory_plan(cfg, policy.model_config, policy.mesh)
    db = ExemplarDB(workdir / "exemplars.sqlite", bucket_width=float(cfg.rl.bucket_width))
    writer = MetricsWriter(workdir)
    settings = FarmSettings.from_config(cfg.farm)
    return Run(cfg=cfg, specs=specs, workdir=workdir, policy=policy, tasks=tasks, db=db, writer=writer,
               farm_factory=lambda: Farm(settings, workdir, task_suite=str(cfg.tasks.suite),
                                         task_hashes={t.task_id: t.sha256 for t in tasks}),
               heldout=heldout)

def heldout_ids(cfg: Any, tasks: Sequence[TaskInfo]) -> list[str]:
    """`tasks.heldout` resolved to task ids of the task set (kept out of RL and of SFT's fast
    programs; evaluated like the others)."""
    keys = [k.strip() for k in str(cfg.tasks.heldout).split(",") if k.strip()]
    if not keys:
        return []
    try:
        out = resolve_task_ids(str(cfg.tasks.suite), keys)
    except Exception as err:  # noqa: BLE001 - an unknown id: say which
        raise TrainConfigError(f"tasks.heldout: {err}") from None
    ids = {t.task_id for t in tasks}
    for k, tid in zip(keys, out, strict=True):
        if tid not in ids:
            raise TrainConfigError(f"tasks.heldout: {k} is not in tasks.ids")
    if len(out) >= len(ids) and "rl" in stage_list(cfg):
        raise TrainConfigError("tasks.heldout holds every task: RL would have nothing to train on")
    return out


def _corpus(tasks: Sequence[TaskInfo]) -> list[str]:
    texts = builtin_sources()
    for t in tasks:
        texts += [sft_prompt(t.source), contrastive_prompt(t.source, [])]
    texts += [p.completion for p in task_programs(list(tasks), "cpu", mixture=True)]
    return texts


def farm_device(cfg: Any) -> str:
    if cfg.farm.endpoints:
        return "cuda"
    if cfg.farm.local_device != "auto":
        return str(cfg.farm.local_device)
    from learner.rl.farm import host_has_gpu

    return "cuda" if host_has_gpu() else "cpu"


# ---------------------------------------------------------------------------------------
# known programs: SFT targets, exemplar seeds, program names in reports

def measure_known_programs(run: Run) -> dict[str, float]:
    """With `sft.measure_targets`, score the known programs on the farm (`measure_programs`) and
    keep their speedups in `run.measured` (code sha -> speedup; else it stays empty). Called once
    before any stage (`train`), and by the paths that evaluate without training."""
    if run.cfg.sft.measure_targets:
        progs = known_programs(run)
        run.measured = measure_programs(run, progs) if progs else {}
    return run.measured


def known_programs(run: Run) -> list[Program]:
    """The task set's known programs that fit `max_seq_len` (computed on first use; no farm)."""
    if run._known is None:
        device = run.cfg.tasks.variant_device
        if device == "auto":
            device = farm_device(run.cfg)
        fitted = []
        for t in task_programs(run.tasks, device, mixture=run.cfg.tasks.programs == "mixture"):
            longest = max(len(run.encode_prompt(p.prompt)) + len(run.encode_completion(p.completion))
                          for p in sft_pairs_for(t))
            completion = len(run.encode_completion(t.completion))
            if longest > int(run.cfg.max_seq_len) or completion > int(run.cfg.sampling.max_new_tokens):
                log.warning("program %s of %s needs %d tokens (completion %d) > max_seq_len=%d "
                            "(sampling.max_new_tokens=%d); not used", t.name, t.task.task_id, longest,
                            completion, run.cfg.max_seq_len, run.cfg.sampling.max_new_tokens)
            else:
                fitted.append(t)
        run._known = fitted
    return run._known


def measure_programs(run: Run, programs: Sequence[Program]) -> dict[str, float]:
    """Score each known program once on the farm (reusing earlier measurements of this run); the
    OK ones enter the exemplar database (stage "sft", step 0). Returns code sha -> speedup."""
    known = {r.sample_id: r for r in run.db.records(stage="sft")}
    todo: list[tuple[str, Program]] = []
    ids: dict[str, Program] = {}
    for t in programs:
        sid = f"sftdata-{t.task.task_id}-{t.sha[:16]}"
        ids[sid] = t
        if sid not in known:
            todo.append((sid, t))
    if todo:
        log.info("scoring %d known programs on the farm (their speedups seed the exemplar buckets)", len(todo))
        run.start_farm()  # only when some program has no score in this workdir yet
        for sid, t in todo:
            run.farm.submit(sid, t.task.task_id, t.code, tags={"task": t.task.task_id, "stage": "sft-data"})
        got = run.farm.wait([sid for sid, _ in todo], float(run.cfg.farm.wait_timeout_s))
        run.db.add_many(
            SampleRecord(sample_id=sid, task_id=t.task.task_id, code=t.code.strip(), verdict=got[sid].verdict,
                         speedup=got[sid].speedup, reward=None, policy_version=-1, step=0, stage="sft",
                         prompt_version=PROMPT_VERSION, detail=got[sid].detail[:500])
            for sid, t in todo)
        for sid, t in todo:
            if not got[sid].ok and t.kind != "wrong":
                log.warning("program %s of %s is not OK on this farm (%s); shown without a score",
                            t.name, t.task.task_id, got[sid].verdict)
        known = {r.sample_id: r for r in run.db.records(stage="sft")}
    return {t.sha: known[sid].speedup for sid, t in ids.items()
            if sid in known and known[sid].speedup is not None}


def sft_pairs(run: Run) -> list[SFTPair]:
    """Every known program under the plain prompt and the contrastive prompt (with no exemplars,
    and with exemplars drawn uniformly from the task's scored programs), except the fast programs
    of held-out tasks (those appear only as exemplars in evaluation prompts, never in SFT data)."""
    progs, measured = known_programs(run), run.measured
    used = [t for t in progs if not (t.task.task_id in run.heldout and t.kind == "fast")]
    n = int(run.cfg.rl.num_exemplars) or int(run.cfg.eval.num_exemplars)
    pairs = []
    for t in used:
        scored = [Exemplar(p.code.strip(), measured[p.sha]) for p in used
                  if p.task.task_id == t.task.task_id and p.sha in measured]
        pairs += sft_pairs_for(t, exemplars_for_sft(t, scored, n) if n > 0 else [])
    if run.cfg.tasks.sft_jsonl:
        pairs += read_jsonl_pairs(run.cfg.tasks.sft_jsonl, run.task_by_id)
    if not pairs:
        raise TrainConfigError("no SFT data: the task set has no shipped fast variants for this "
                               "device and config.tasks.sft_jsonl is empty")
    return pairs


# ---------------------------------------------------------------------------------------
# rewards

def _success_reward(o: FarmOutcome, rule: RewardRule) -> float:
    return float(o.ok)


def _clipped_speedup_reward(o: FarmOutcome, rule: RewardRule) -> float:
    return min(o.speedup or 0.0, rule.clip) if o.ok else 0.0


REWARD_KINDS: dict[str, Callable[[FarmOutcome, RewardRule], float]] = {
    "success": _success_reward,  # self-supervised
    "speedup": _clipped_speedup_reward,  # contrastive RL
}


def rewards(outcomes: Sequence[FarmOutcome], rule: RewardRule) -> list[float | None]:
    """Each outcome's reward under `rule`:

    * INFRA_ERROR or LOST (the farm's fault, not the policy's): None, left out of the update
      and stored without a reward;
    * any other failure (PARSE_FAILURE, a build or correctness failure, a timeout,
      HACK_DETECTED, ...): 0.0;
    * OK: kind "success" (self-supervised) 1.0; kind "speedup" (RL) the measured speedup,
      at most `rule.clip`.

    Known-program measurements and evaluation samples are stored with no reward (None)."""
    score = REWARD_KINDS[rule.kind]
    return [None if o.infra else score(o, rule) for o in outcomes]


# ---------------------------------------------------------------------------------------
# state, checkpoints, stage boundaries

def _stage_tx(run: Run, stage: str) -> Any:
    return make_optimizer(optimizer_config(run.cfg, stage))


def _checkpointer(run: Run, stage: str) -> Checkpointer:
    return Checkpointer(run.workdir / "ckpt" / stage, max_to_keep=int(run.cfg.keep_checkpoints),
                        async_save=False)


def _fresh_state(run: Run, stage: str, params: Any) -> TrainState:
    """A new state of `stage`'s optimizer around `params`, which it takes over (a step donates them)."""
    model = nnx.merge(run.policy.graphdef, params)
    return create_train_state(model, _stage_tx(run, stage), seed=int(run.cfg.seed), mesh=run.policy.mesh)


def _template(run: Run, stage: str) -> TrainState:
    """What a checkpoint of `stage` restores into: shapes and shardings only, no device memory."""
    return abstract_train_state(run.policy.graphdef, run.policy.abstract_params, _stage_tx(run, stage),
                                mesh=run.policy.mesh)

def _final_params(run: Run, stage: str) -> Any:
    """The params a finished stage ended with."""
    with _checkpointer(run, stage) as ck:
        return ck.restore(_template(run, stage)).params


def _start_params(run: Run, stage: str, stages: Sequence[str]) -> Any:
    """A stage starts from the previous stage's final params, else from `init_from`, else from the
    policy's initial weights (handed over: the policy keeps only their shapes afterwards)."""
    i = list(stages).index(stage)
    if i > 0:
        return _final_params(run, stages[i - 1])
    if run.cfg.init_from:
        return load_stage_params(run, Path(run.cfg.init_from))
    return run.policy.take_params()


def load_stage_params(run: Run, path: Path, step: int | None = None) -> Any:
    """Params from a stage checkpoint directory (written by any stage's optimizer)."""
    if not path.is_dir():
        raise TrainConfigError(f"checkpoint directory {path} does not exist")
    errors = []
    with Checkpointer(path, async_save=False) as ck:
        if ck.latest_step() is None:
            raise TrainConfigError(f"no checkpoint in {path}")
        for stage in STAGES:  # the optimizer state's structure depends on the stage's optimizer
            try:
                return ck.restore(_template(run, stage), step).params
            except Exception as err:  # noqa: BLE001 - try the next optimizer layout
                errors.append(f"{stage}: {str(err).splitlines()[0][:200]}")
    raise TrainConfigError(f"cannot restore params from {path} with this model config: " + "; ".join(errors))

def _keeps_reference(run: Run, stage: str) -> bool:
    """RL with a KL term keeps a frozen copy of its starting params."""
    spec = run.specs.get(stage)
    return isinstance(spec, RLSpec) and float(spec.grpo.kl_coef) > 0


def _stage_state(run: Run, stage: str, stages: Sequence[str]) -> tuple[TrainState, Any, int]:
    """(state to continue from, RL's frozen reference policy or None, step restored or 0).

    Nothing is kept that the stage does not use: a resumed stage restores into an abstract
    template; the starting params are read only to build a fresh state, and for RL's KL term,
    whose reference is a copy in `rl.reference_dtype` (fresh buffers: the state's are donated)."""
    with _checkpointer(run, stage) as ck:
        latest = ck.latest_step()
        state = ck.restore(_template(run, stage)) if latest is not None else None
    reference = None
    keep_reference = _keeps_reference(run, stage)
    if state is None or keep_reference:
        start = _start_params(run, stage, stages)
        if keep_reference:
            reference = reference_copy(start, reference_dtype(run.cfg, run.policy.model_config))
        if state is None:
            state = _fresh_state(run, stage, start)
        del start
    return state, reference, int(latest or 0)


def stage_done(run: Run, stage: str) -> bool:
    with _checkpointer(run, stage) as ck:
        return (ck.latest_step() or 0) >= run.specs[stage].steps > 0

def _save(ck: Checkpointer, state: TrainState, every: int, total: int) -> None:
    step = int(jax.device_get(state.step))
    if step % max(1, every) == 0 or step >= total:
        ck.save(state, force=True)


def _advance(state: TrainState, k: int) -> TrainState:
    return state.replace(step=state.step + k)


# ---------------------------------------------------------------------------------------
# stage internals

def _sft_rows(run: Run) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) of every SFT pair that fits `max_seq_len`."""
    rows = []
    for p in sft_pairs(run):
        prompt, comp = run.encode_prompt(p.prompt), run.encode_completion(p.completion)
        if len(prompt) + len(comp) > int(run.cfg.max_seq_len):  # user-supplied pairs
            log.warning("SFT pair for %s is %d tokens > max_seq_len; skipped", p.task_id, len(prompt) + len(comp))
            continue
        rows.append((prompt, comp))
    if not rows:
        raise TrainConfigError("every SFT pair is longer than max_seq_len")
    return rows


def _sft_step(run: Run, spec: SFTSpec, state: TrainState, rows: Sequence[tuple[list[int], list[int]]],
              batches: LengthGroupedSampler, step: int, loss_fn: Any) -> tuple[TrainState, dict[str, float]]:
    """One SFT step on a batch drawn for global step `spec.offset + step`."""
    pick, length = batches.sample(_np_rng(run, spec.offset + step, 0))
    t0 = time.perf_counter()
    batch = lm_batch([rows[i] for i in pick], run.policy.pad_id, int(run.cfg.max_seq_len), length)
    state, m = scale.step(state, batch, loss_fn, scale.micro_batch_tokens(run.cfg))
    m = {k: float(v) for k, v in jax.device_get(m).items()}
    m["step_s"] = time.perf_counter() - t0
    return state, m


def _lm_loss() -> Any:
    """The SFT and self-supervised loss (one per stage, as a static argument of the step)."""
    return functools.partial(lm_loss_sum_count, chunk_size=512)


def _selfsup_round(run: Run, spec: SelfSupSpec, state: TrainState, sampler: Sampler, rnd: int,
                   loss_fn: Any) -> tuple[TrainState, dict[str, float]]:
    """Sample `spec.samples_per_task` codes per task, score them, store them, and take
    `spec.passes` steps over the successes (or advance the step count when there are none)."""
    k = spec.passes
    gstep = spec.offset + rnd * k
    prompts = _sft_prompts(run, f"selfsup-{gstep}", spec.samples_per_task)
    rollouts, gen = generate_rollouts(
        sampler, run.tokenizer, prompts, run.sampling(), _jax_key(run, gstep, 1),
        policy_version=gstep, batch_size=int(run.cfg.sampling.batch_size))
    ids = _score_rollouts(run, rollouts, "selfsup")
    outcomes, waited = _outcomes(run, rollouts, ids)
    given = rewards([outcomes[r.sample_id] for r in rollouts], spec.reward)
    reward_of = {r.sample_id: g for r, g in zip(rollouts, given, strict=True)}
    run.db.add_many(_records(rollouts, outcomes, reward_of, gstep + k, "selfsup"))
    wins = [(r.prompt_ids, r.completion_ids) for r in rollouts if outcomes[r.sample_id].ok]
    m = outcome_metrics([outcomes[r.sample_id] for r in rollouts])
    m.update(tokens_per_s=gen.tokens_per_s, farm_wait_s=waited, successes_trained=len(wins),
             learning_rate=spec.optimizer.learning_rate, **_length_metrics(rollouts))
    if not wins:
        log.info("self-supervised round %d: no successes; no update", rnd)
        return _advance(state, k), m
    # one update per pass over all of the round's successes (rows padded with empty,
    # masked-out completions to a multiple of batch_size: few compiled shapes)
    rows = list(wins) + [(wins[0][0], [])] * (-len(wins) % spec.batch_size)
    losses = []
    for _ in range(k):
        state, lm = scale.step(state, lm_batch(rows, run.policy.pad_id, int(run.cfg.max_seq_len)),
                               loss_fn, scale.micro_batch_tokens(run.cfg))
        losses.append(float(lm["loss"]))
    m["loss"] = float(np.mean(losses))
    sampler.update_params(state.params)
    return state, m


def _rl_overlap(run: Run, spec: RLSpec) -> bool:
    """Whether RL samples step t+1 while the farm scores step t (rl.overlap; "auto": unless the
    local farm times kernels on this machine's CPU cores)."""
    overlap = spec.overlap == "on" or (spec.overlap == "auto" and not run.farm.shares_cpu_with_learner)
    if spec.overlap == "auto" and not overlap:
        log.warning("rl.overlap is off: the local farm times kernels on this machine's CPU cores, and "
                    "sampling at the same time would distort its speedups (force with rl.overlap=on)")
    return overlap


@dataclasses.dataclass
class _Batch:
    rollouts: list[Rollout]
    ids: list[str]
    gen_tokens_per_s: float
    num_exemplars: float


def _rl_generate(run: Run, spec: RLSpec, sampler: Sampler, gstep: int, version: int) -> _Batch:
    """Sample global step `gstep`'s groups and submit them to the farm."""
    prompts, shown = _rl_prompts(run, spec, gstep)
    if not prompts:
        raise TrainConfigError("no RL prompt fits max_seq_len - sampling.max_new_tokens")
    rollouts, gen = generate_rollouts(sampler, run.tokenizer, prompts, run.sampling(),
                                      _jax_key(run, gstep, 4), policy_version=version,
                                      batch_size=int(run.cfg.sampling.batch_size))
    ids = _score_rollouts(run, rollouts, "rl")
    return _Batch(rollouts, ids, gen.tokens_per_s, shown)


def _rl_update(run: Run, spec: RLSpec, state: TrainState, reference: Any, batch: _Batch, gstep: int,
               version: int, sampler: Sampler, loss_fn: Any) -> tuple[TrainState, dict[str, float]]:
    """Wait for `batch`'s outcomes, store them, take one GRPO step on them, and hand the new
    params to the sampler. Samples without
    a reward (`rewards`: INFRA_ERROR, LOST) or measured on another GPU model than the rest of
    their group (`one_model_per_group`) are left out."""
    outcomes, waited = _outcomes(run, batch.rollouts, batch.ids)
    rollouts = batch.rollouts
    got = [outcomes[r.sample_id] for r in rollouts]
    given = rewards(got, spec.reward)
    valid = np.array([g is not None for g in given])
    reward = np.array([0.0 if g is None else g for g in given], np.float32)
    groups = np.array([r.group for r in rollouts])
    valid &= np.array(one_model_per_group(got, groups.tolist()))
    adv = group_advantages(reward, groups, valid, spec.grpo)
    reward_of = {r.sample_id: (float(reward[i]) if valid[i] else None) for i, r in enumerate(rollouts)}
    run.db.add_many(_records(rollouts, outcomes, reward_of, gstep + 1, "rl"))
    mbt = scale.micro_batch_tokens(run.cfg)
    b = grpo_batch(rollouts, adv, valid, run.policy.pad_id, int(run.cfg.max_seq_len))
    t_ref = time.perf_counter()
    b["ref_logprobs"] = (batch_reference_logprobs(state, reference, b, mbt)
                         if spec.grpo.kl_coef > 0 else np.zeros_like(b["old_logprobs"]))
    t0 = time.perf_counter()
    ref_s = t0 - t_ref
    state, lm = scale.step(state, b, loss_fn, mbt)
    sampler.update_params(state.params)
    m = {k: float(v) for k, v in jax.device_get(lm).items()}
    m.update(outcome_metrics(got))
    m.update(reward_mean=float(reward[valid].mean()) if valid.any() else 0.0,
             adv_mean=float(adv[valid].mean()) if valid.any() else 0.0,
             adv_std=float(adv[valid].std()) if valid.any() else 0.0,
             infra_excluded=int((~valid).sum()), tokens_per_s=batch.gen_tokens_per_s,
             farm_wait_s=waited, update_s=time.perf_counter() - t0, reference_s=ref_s,
             staleness=float(version - np.mean([r.policy_version for r in rollouts])),
             exemplars_in_prompt=batch.num_exemplars, learning_rate=spec.optimizer.learning_rate,
             **_length_metrics(rollouts))
    return state, m

def _length_metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """Response lengths and the share cut off by max_new_tokens."""
    if not rollouts:
        return {}
    lengths = [len(r.completion_ids) for r in rollouts]
    return {"response_len_mean": float(np.mean(lengths)), "response_len_max": float(np.max(lengths)),
            "truncation_rate": float(np.mean([r.finish_reason == "length" for r in rollouts]))}


def _sampler(run: Run, params: Any) -> Sampler:
    model = nnx.merge(run.policy.graphdef, params)
    s = run.cfg.sampling
    steps_per_check = int(s.steps_per_check)
    if str(s.engine) == "continuous":
        if jax.process_count() > 1:
            raise TrainConfigError("sampling.engine=continuous runs in one process; use static in multi-host runs")
        return ContinuousSampler(model, rows=int(s.batch_size), chunk=int(s.engine_chunk),
                                 pad_id=run.policy.pad_id, min_bucket=64, mesh=run.policy.mesh,
                                 steps_per_check=steps_per_check)
    return Sampler(model, pad_id=run.policy.pad_id, min_bucket=64, mesh=run.policy.mesh,
                   steps_per_check=steps_per_check)


# ---------------------------------------------------------------------------------------
# prompts

def _contrastive(run: Run, task: TaskInfo, exemplars: Sequence[Exemplar]) -> str:
    return contrastive_prompt(task.source, exemplars, order=str(run.cfg.rl.exemplar_order), seed=int(run.cfg.seed))


def _prompt_ids(run: Run, task: TaskInfo, exemplars: list[Exemplar] | None) -> tuple[list[int], int] | None:
    """Token ids of the task's prompt that fit `max_seq_len - max_new_tokens`, and the number of
    exemplars shown. `exemplars=None`: the SFT prompt; a list: the contrastive prompt, dropping the
    weakest exemplars until it fits. None when even the smallest form does not fit."""
    if exemplars is None:
        ids = run.encode_prompt(sft_prompt(task.source))
    else:
        ids = run.encode_prompt(_contrastive(run, task, exemplars))
        while len(ids) > run.max_prompt_len() and exemplars:
            exemplars = sorted(exemplars, key=lambda e: (e.speedup, e.code))[1:]
            ids = run.encode_prompt(_contrastive(run, task, exemplars))
    if len(ids) > run.max_prompt_len():
        log.warning("prompt for %s is %d tokens > %d; skipped", task.task_id, len(ids), run.max_prompt_len())
        return None
    return ids, len(exemplars or [])


def _sft_prompts(run: Run, prefix: str, per_task: int) -> list[Prompt]:
    out = []
    for g, t in enumerate(run.tasks):
        fitted = _prompt_ids(run, t, None)
        if fitted is not None:
            out += repeat_prompt(prefix, t.task_id, g, fitted[0], per_task)
    return out

def _exemplars(run: Run, spec: RLSpec, task: TaskInfo, rng: np.random.Generator) -> list[Exemplar]:
    """Earlier kernels for the task's contrastive prompt (none for plain GRPO): drawn by the
    paper's bucket rule, or uniformly among the task's distinct successful codes ("random")."""
    n = spec.num_exemplars
    if n <= 0:
        return []
    if spec.exemplar_rule == "random":
        return sample_random_exemplars(run.db, task.task_id, n, rng)
    return run.db.sample_exemplars(task.task_id, n, spec.tau, rng)


def _rl_prompts(run: Run, spec: RLSpec, gstep: int) -> tuple[list[Prompt], float]:
    """`spec.group_size` samples of the contrastive prompt of each of `spec.tasks_per_step` RL
    tasks drawn for global step `gstep`, and the mean number of exemplars shown."""
    rng = _np_rng(run, gstep, 3)
    tasks = run.rl_tasks
    n_tasks = min(spec.tasks_per_step, len(tasks))
    chosen = rng.choice(len(tasks), size=n_tasks, replace=False)
    out, shown = [], []
    for g, ti in enumerate(sorted(int(i) for i in chosen)):
        task = tasks[ti]
        fitted = _prompt_ids(run, task, _exemplars(run, spec, task, rng))
        if fitted is None:
            continue
        ids, n_shown = fitted
        shown.append(n_shown)
        out += repeat_prompt(f"rl-{gstep}", task.task_id, g, ids, spec.group_size)
    return out, float(np.mean(shown)) if shown else 0.0


# ---------------------------------------------------------------------------------------
# scoring helpers

def _score_rollouts(run: Run, rollouts: Sequence[Rollout], stage: str) -> list[str]:
    """Submit the parsed ones; returns their sample ids."""
    items = [(r.sample_id, r.task_id, r.code,
              {"task": r.task_id, "stage": stage, "policy_version": str(r.policy_version)})
             for r in rollouts if r.code]
    run.farm.check_step_size(len(rollouts))
    return run.farm.submit_many(items, seed=rollouts[0].sample_id if rollouts else 0)


def _outcomes(run: Run, rollouts: Sequence[Rollout], ids: Sequence[str]) -> tuple[dict[str, FarmOutcome], float]:
    """Wait (bounded) for the farm; parse failures become PARSE_FAILURE outcomes."""
    t0 = time.perf_counter()
    got = run.farm.wait(ids, float(run.cfg.farm.wait_timeout_s)) if ids else {}
    waited = time.perf_counter() - t0
    for r in rollouts:
        if not r.code:
            got[r.sample_id] = FarmOutcome(r.sample_id, Outcome.PARSE_FAILURE, detail=r.parse_failure)
    return got, waited


def _records(rollouts: Sequence[Rollout], outcomes: dict[str, FarmOutcome], reward_of: dict[str, float | None],
             step: int, stage: str) -> list[SampleRecord]:
    out = []
    for r in rollouts:
        o = outcomes[r.sample_id]
        out.append(SampleRecord(
            sample_id=r.sample_id, task_id=r.task_id, code=r.code, verdict=o.verdict,
            speedup=o.speedup, reward=reward_of.get(r.sample_id), policy_version=r.policy_version,
            step=step, stage=stage, prompt_version=PROMPT_VERSION,
            detail=(o.hack_reason or o.detail or r.parse_failure)[:500],
        ))
    return out


def outcome_metrics(outcomes: Sequence[FarmOutcome]) -> dict[str, float]:
    n = len(outcomes)
    verdicts = Counter(o.verdict for o in outcomes)
    speedups = [o.speedup for o in outcomes if o.ok and o.speedup is not None]
    m: dict[str, float] = {f"verdict/{v}": c for v, c in verdicts.items()}
    m["samples"] = n
    m["success_rate"] = len(speedups) / n if n else 0.0
    m["hacks"] = verdicts.get(Outcome.HACK_DETECTED, 0)
    lat = [o.latency_s for o in outcomes if o.verdict is not Outcome.PARSE_FAILURE]
    if lat:
        m["farm_latency_s"] = float(np.mean(lat))
    if speedups:
        m.update(speedup_mean=float(np.mean(speedups)), speedup_median=float(np.median(speedups)),
                 speedup_max=float(np.max(speedups)))
    for o in outcomes:
        if o.verdict is Outcome.PARSE_FAILURE:
            m[f"parse_failure/{o.detail}"] = m.get(f"parse_failure/{o.detail}", 0) + 1
    return m


def _np_rng(run: Run, step: int, salt: int) -> np.random.Generator:
    return np.random.default_rng([int(run.cfg.seed), step, salt])


def _jax_key(run: Run, step: int, salt: int) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(int(run.cfg.seed)), step), salt)


def _progress(run: Run, total: int, initial: int, desc: str) -> tqdm:
    return tqdm(total=total, initial=initial, desc=desc, disable=not run.cfg.progress, dynamic_ncols=True)


# ---------------------------------------------------------------------------------------
# evaluation and the report

EVAL_FORMS = ("plain", "exemplars")
FORM_LABELS = {"plain": "plain prompt", "exemplars": "frozen exemplars"}


def eval_forms(cfg: Any) -> list[str]:
    return [f.strip() for f in str(cfg.eval.prompts).split(",") if f.strip()]


def frozen_exemplars(run: Run) -> dict[str, list[Exemplar]]:
    """The evaluation prompts' exemplars, fixed for the whole run (and shared with other runs
    through `eval.exemplars_from`): per task the slowed copy and the fast program when the farm
    scored both OK (chosen by kind, not by score: a noisy CPU farm can swap their measured
    order), else the slowest and the fastest distinct OK program; then the rest by speedup, up
    to `eval.num_exemplars`. Shown with their measured speedups. Written to
    <workdir>/eval_exemplars.json on first use."""
    path = run.workdir / "eval_exemplars.json"
    src = Path(run.cfg.eval.exemplars_from) if run.cfg.eval.exemplars_from else path
    if src.is_file():
        data = json.loads(src.read_text())
    else:
        progs, measured = known_programs(run), run.measured
        data = {}
        n = int(run.cfg.eval.num_exemplars)
        for task in run.tasks:
            mine = [p for p in progs if p.task.task_id == task.task_id and p.sha in measured]
            ok = sorted({(measured[p.sha], p.name, p.code.strip()) for p in mine})
            by_kind = {p.kind: (measured[p.sha], p.name, p.code.strip()) for p in sorted(
                mine, key=lambda p: measured[p.sha])}
            if "slowed" in by_kind and "fast" in by_kind:
                first = [by_kind["slowed"], by_kind["fast"]]
            else:
                first = [ok[0], ok[-1]] if len(ok) >= 2 else list(ok)
            picked = first + [e for e in ok if e not in first]
            data[task.task_id] = [{"program": name, "speedup": sp, "code": code} for sp, name, code in picked[:n]]
    if src != path:
        path.write_text(json.dumps(data, indent=1))
    elif not path.is_file():
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.rename(path)
    return {t: [Exemplar(e["code"], float(e["speedup"])) for e in ex] for t, ex in data.items()}


def _program_names(run: Run) -> dict[tuple[str, str], str]:
    """(task, code sha) -> program name, for the known programs and the frozen exemplars."""
    return {(p.task.task_id, p.sha): p.name for p in known_programs(run)}


def evaluate(run: Run, params: Any, label: str, *, form: str, samples_per_task: int,
             temperature: float, db: ExemplarDB | None = None) -> tuple[SpeedupSummary, list[dict[str, Any]]]:
    """Sample `samples_per_task` responses per task under one prompt form, score them, summarize.

    `form`: "plain" (the SFT prompt) or "exemplars" (the contrastive prompt with the run's frozen
    exemplar set, `frozen_exemplars`): every stage is evaluated under the same prompts. Starts the
    farm unless it runs already. The known programs' speedups (`measure_known_programs`) are
    read from `run.measured`."""
    if form not in EVAL_FORMS:
        raise TrainConfigError(f"evaluation prompt form must be one of {', '.join(EVAL_FORMS)}, got {form!r}")
    run.start_farm()
    sampler = _sampler(run, params)
    frozen = frozen_exemplars(run) if form == "exemplars" else {}
    names = _program_names(run)
    prompts: list[Prompt] = []
    for g, t in enumerate(run.tasks):
        fitted = _prompt_ids(run, t, list(frozen.get(t.task_id, [])) if form == "exemplars" else None)
        if fitted is not None:
            prompts += repeat_prompt(f"eval-{label}-{form}", t.task_id, g, fitted[0], samples_per_task)
    rollouts, _ = generate_rollouts(sampler, run.tokenizer, prompts, run.sampling(temperature),
                                    _jax_key(run, 0, 9), policy_version=-1,
                                    batch_size=int(run.cfg.sampling.batch_size))
    outcomes, _ = _outcomes(run, rollouts, _score_rollouts(run, rollouts, f"eval:{label}"))
    if db is not None:
        db.add_many(_records(rollouts, outcomes, {}, 0, f"eval:{label}:{form}"))
    samples = []
    for r in rollouts:
        o = outcomes[r.sample_id]
        sha = code_sha256(r.code) if r.code else ""
        program = names.get((r.task_id, sha), f"new:{sha[:8]}") if r.code else "unparsed"
        samples.append(dict(task=r.task_id, verdict=o.verdict, speedup=o.speedup, detail=o.detail[:200],
                            program=program, heldout=r.task_id in run.heldout, seed=int(run.cfg.seed),
                            response_len=len(r.completion_ids), truncated=r.finish_reason == "length"))
    return summarize([s["speedup"] for s in samples]), samples


def _eval_path(run: Run, stage: str) -> Path:
    return run.workdir / "eval" / f"{stage}.json"


def _eval_pending(run: Run, stage: str) -> bool:
    return bool(run.cfg.eval.after_each_stage) and not _eval_path(run, stage).is_file()


def _eval_stage(run: Run, stage: str, params: Any) -> None:
    """Evaluate the stage's final policy under every configured prompt form (once: see
    `_eval_pending`)."""
    out = _eval_path(run, stage)
    label = stage_label(run.cfg, stage)
    log.info("evaluating the policy %s", label)
    forms, rows = {}, {}
    with ExemplarDB(run.workdir / "eval.sqlite") as edb:
        for form in eval_forms(run.cfg):
            summary, samples = evaluate(run, params, stage, form=form,
                                        samples_per_task=int(run.cfg.eval.samples_per_task),
                                        temperature=float(run.cfg.eval.temperature), db=edb)
            forms[form] = {"summary": summary.to_dict(), "samples": samples}
            rows[f"{label} | {FORM_LABELS[form]}"] = summary
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"label": label, "forms": forms}, indent=1))
    tmp.rename(out)
    print(format_table(rows), flush=True)


def load_stage_evals(workdir: Path, stages: Sequence[str]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """{form: {stage label: samples}} from <workdir>/eval/<stage>.json, in stage order."""
    by_form: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for stage in stages:
        f = workdir / "eval" / f"{stage}.json"
        if not f.is_file():
            continue
        data = json.loads(f.read_text())
        for form, d in data.get("forms", {}).items():
            by_form.setdefault(form, {})[data["label"]] = d["samples"]
    return by_form


def final_report(run: Run, stages: Sequence[str]) -> dict[str, Path]:
    by_form = load_stage_evals(run.workdir, stages)
    speedups, verdicts, texts, mds = {}, {}, [], []
    for form, labelled in by_form.items():
        for label, samples in labelled.items():
            key = f"{label} | {FORM_LABELS.get(form, form)}"
            speedups[key] = [s["speedup"] for s in samples]
            verdicts[key] = [s["verdict"] for s in samples]
        text, md = stage_notes(labelled, FORM_LABELS.get(form, form))
        texts.append(text)
        mds.append(md)
        held = {label: [s for s in samples if s.get("heldout")] for label, samples in labelled.items()}
        if any(held.values()):
            text, md = stage_notes(held, f"{FORM_LABELS.get(form, form)}, held-out tasks only")
            texts.append(text)
            mds.append(md)
    if not speedups:
        return {}
    paths = write_report(run.workdir / "report", speedups, verdicts,
                         title=f"Speedups of sampled kernels ({run.workdir}; failures count as 0)",
                         notes_text="\n".join(texts), notes_md="\n".join(mds))
    print("\n" + paths["txt"].read_text(), flush=True)
    print(f"report: {', '.join(str(p) for p in paths.values())}", flush=True)
    return paths
