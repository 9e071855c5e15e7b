"""The run: what every stage shares (config, stage specs, policy, task set, farm, exemplar
database, metrics), opened (or reopened, on resume) once per process by `open_run`. The farm
starts only when scoring begins (`Run.start_farm`).

Across processes (`learner.runtime.controller`) process 0 is the controller: only it opens the
exemplar database, writes metrics and the recorded config, and starts the farm; on the other
processes `Run.db` and `Run.farm` raise, metrics go nowhere and `start_farm` does nothing. Every
value the stages take from them reaches the other processes through `controller.share`."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from learner.config_check import TrainConfigError, resume_conflicts, validate_config
from learner.lm.sampler import SamplingConfig
from learner.lm.sharding import batch_size_multiple
from learner.report.metrics import MetricsWriter
from learner.rl.exemplars import ExemplarDB, SampleRecord
from learner.rl.farm import Farm, FarmSettings
from learner.rl.prompts import contrastive_prompt, sft_prompt
from learner.rl.tasks import (
    Program,
    TaskInfo,
    builtin_sources,
    load_task_set,
    resolve_task_ids,
    task_programs,
)
from learner.runtime import compile_cache, controller, scale
from learner.runtime.policy import Policy, build_policy
from learner.stages.specs import StageSpec, stage_list, stage_specs

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Run:
    """What every stage shares: config, stage specs, policy, tasks, farm, database, metrics."""

    cfg: Any  # the whole config
    specs: dict[str, StageSpec]  # the configured stages, in pipeline order
    workdir: Path
    policy: Policy
    tasks: list[TaskInfo]
    _db: ExemplarDB | None  # process 0's (None on the other processes)
    writer: MetricsWriter | NoMetrics
    farm_factory: Callable[[], Farm]
    heldout: frozenset[str] = frozenset()  # task ids kept out of RL (evaluated only)
    measured: dict[str, float] = dataclasses.field(default_factory=dict)  # code sha -> speedup
    _farm: Farm | None = None
    _known: list[Program] | None = None

    @property
    def db(self) -> ExemplarDB:
        """The exemplar database (process 0 only)."""
        if self._db is None:
            raise RuntimeError("the exemplar database lives in process 0 (learner.runtime.controller)")
        return self._db

    def store(self, records: Sequence[SampleRecord]) -> None:
        """Add scored samples to the exemplar database (process 0; nothing elsewhere)."""
        if self._db is not None:
            self._db.add_many(records)

    @property
    def stages(self) -> list[str]:
        return list(self.specs)

    @property
    def rl_tasks(self) -> list[TaskInfo]:
        return [t for t in self.tasks if t.task_id not in self.heldout]

    @property
    def farm(self) -> Farm:
        """The running farm (`start_farm` starts it)."""
        if not controller.is_controller():
            raise RuntimeError("the farm session lives in process 0 (learner.runtime.controller)")
        if self._farm is None:
            raise RuntimeError("the farm is not started: call Run.start_farm() first")
        return self._farm

    def start_farm(self) -> None:
        """Start the farm (local daemons, or a client of `farm.endpoints`) unless it runs already
        (process 0 only: the other processes never talk to the farm)."""
        if self._farm is None and controller.is_controller():
            self._farm = self.farm_factory()

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
        if self._db is not None:
            self._db.close()


class NoMetrics:
    """The metrics sink of the processes other than 0: every write goes nowhere."""

    def write(self, step: int, metrics: dict[str, float], *, stage: str) -> None:
        pass

    def close(self) -> None:
        pass


def open_run(cfg: Any, *, record_config: bool = True) -> Run:
    """Open (or reopen) the run in `cfg.workdir`: refuse a resume under an incompatible config,
    record the config, build the policy and the stage specs. Starts no farm (`Run.start_farm`)."""
    validate_config(cfg)
    specs = stage_specs(cfg)
    workdir = Path(cfg.workdir)
    controller.share("config", lambda: _record_config(cfg, workdir, record_config))
    compile_cache.enable(cfg.jax_cache_dir, workdir)  # before the first compilation (build_policy)
    tasks = load_task_set(cfg.tasks.suite, cfg.tasks.ids)
    heldout = frozenset(heldout_ids(cfg, tasks))
    policy = build_policy(cfg, workdir, _corpus(tasks))
    _check_rows_split(cfg, policy.mesh)
    scale.run_memory_plan(cfg, policy.model_config, policy.mesh)
    mine = controller.is_controller()
    db = ExemplarDB(workdir / "exemplars.sqlite", bucket_width=float(cfg.rl.bucket_width)) if mine else None
    writer = MetricsWriter(workdir) if mine else NoMetrics()
    settings = FarmSettings.from_config(cfg.farm)
    return Run(cfg=cfg, specs=specs, workdir=workdir, policy=policy, tasks=tasks, _db=db, writer=writer,
               farm_factory=lambda: Farm(settings, workdir, task_suite=str(cfg.tasks.suite),
                                         task_hashes={t.task_id: t.sha256 for t in tasks}),
               heldout=heldout)


def _check_rows_split(cfg: Any, mesh: Any) -> None:
    """Across processes every process samples its share of each `sampling.batch_size` rows, split
    over its devices: refuse at start a batch size that does not split (one process replicates it)."""
    if not controller.multi_process():
        return
    shards = batch_size_multiple(mesh)
    if int(cfg.sampling.batch_size) % shards:
        raise TrainConfigError(f"config.sampling.batch_size={cfg.sampling.batch_size}: across processes it must be "
                               f"a multiple of the mesh's {shards} batch shards (data x fsdp)")


def _record_config(cfg: Any, workdir: Path, record: bool) -> None:
    """Refuse to resume a workdir under an incompatible config; record the config (process 0)."""
    recorded = workdir / "config.json"
    if record and recorded.is_file() and (workdir / "ckpt").is_dir():
        problems = resume_conflicts(json.loads(recorded.read_text()), cfg)
        if problems and not cfg.resume_force:
            raise TrainConfigError(
                f"{workdir} holds a run with a different config: " + "; ".join(problems)
                + ". Resuming would mix incompatible steps and exemplar rows: use a new workdir, "
                "or --config.resume_force=True to resume anyway")
        for p in problems:
            log.warning("resume_force: %s", p)
    workdir.mkdir(parents=True, exist_ok=True)
    if record:
        recorded.write_text(cfg.to_json_best_effort(indent=1))


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
