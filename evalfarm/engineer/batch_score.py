"""Where a batch's samples are scored: in this process's judges (local) or on farm daemons (remote).

Each returns a ``score_all(items) -> Iterator[row]`` for ``evalfarm.engineer.batch.run_batch``. With a
baseline, the baseline candidate of each task is scored once, and each OK row gets the candidate's
speedup over it (``speedup_vs_<baseline>``) and the baseline's own result (``baseline``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from evalfarm.config import ScoreConfig
from evalfarm.engineer.baseline import compile_candidate, speedup_vs
from evalfarm.engineer.batch import BatchItem, result_row
from evalfarm.judge.standby import WarmJudges
from evalfarm.judge.task_window import WindowSpec
from evalfarm.result import ScoreResult
from evalfarm.tasks.format import Candidate, Task
from evalfarm.verdict import Verdict

log = logging.getLogger(__name__)

# How long a remote batch waits for its next result by default (`evalfarm score --timeout`).
RESULT_TIMEOUT_S = 3600.0


def _with_baseline(item: BatchItem, result: ScoreResult, baseline: ScoreResult | None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if baseline is not None:
        extra = {"speedup_compile": baseline.speedup, "baseline_verdict": baseline.verdict.value,
                 "speedup_vs_compile": speedup_vs(result.speedup, baseline.speedup)}
    return result_row(item, result, extra)


def local_scorer(config: ScoreConfig, resolve: Callable[[str], Task], baseline: str | None = None,
                 build_pool: Any = None, diagnostics: Callable[[BatchItem], Any] | None = None,
                 ) -> Callable[[list[BatchItem]], Iterator[dict[str, Any]]]:
    """Score one sample at a time on ``config.device`` (one judge at a time per device), every
    sample's extension built ahead in ``build_pool``'s parallel workers; ``diagnostics(item)`` gives each sample's evalfarm.judge.diagnose.Diagnostics (--profile ...)."""
    from evalfarm import scoring

    tasks: dict[str, Task | str] = {}
    baselines: dict[str, ScoreResult] = {}

    def task_for(spec: str) -> Task | str:
        if spec not in tasks:
            try:
                tasks[spec] = resolve(spec)
            except Exception as err:  # noqa: BLE001 - an unknown task fails its samples, not the batch
                tasks[spec] = f"unknown task {spec!r}: {err}"
        return tasks[spec]

    def build_all_ahead(items: list[BatchItem]) -> int:
        """Start every sample's extension build now, in the pool's parallel workers, so that the
        judges (one at a time) find them built instead of each waiting for its own (scoring.build_ahead)."""
        pool = build_pool if build_pool is not None else scoring.default_build_pool()
        started = 0
        for item in items:
            task = task_for(item.task)
            if not isinstance(task, str):
                started += scoring.build_ahead(task, Candidate(source=item.source, name=item.sample_id), config, pool)
        return started

    def score_all(items: list[BatchItem]) -> Iterator[dict[str, Any]]:
        started = build_all_ahead(items)
        if started:
            log.info("building %d candidates' extensions ahead, in parallel", started)
        # On a GPU, a standby judge starts while the one before it scores; a CPU evaluation uses
        # every core, so there it would only compete (docs/benchmarks.md). On both, a judge keeps
        # its task's set-up for the batch's next candidates of that task (evalfarm.judge.task_window).
        judges = (WarmJudges({config.device: 1} if config.device != "cpu" else {}, window=WindowSpec())
                  if len(items) > 1 else None)
        try:
            yield from score_items(items, judges)
        finally:
            if judges is not None:
                judges.close()

    def score_items(items: list[BatchItem], judges: WarmJudges | None) -> Iterator[dict[str, Any]]:
        for item in items:
            task = task_for(item.task)
            if isinstance(task, str):
                yield result_row(item, ScoreResult.failure(Verdict.INFRA_ERROR, task, task=item.task))
                continue
            task.resolve_profile(config.size_profile, "cpu" if config.device == "cpu" else "cuda")
            base = None
            if baseline == "compile":
                if item.task not in baselines:
                    log.info("scoring the torch.compile baseline of %s", task.name)
                    baselines[item.task] = scoring.score(task, compile_candidate(task), config, build_pool,
                                                         judges=judges)
                base = baselines[item.task]
            cand = Candidate(source=item.source, name=item.sample_id, path=item.path)
            diag = diagnostics(item) if diagnostics is not None else None
            yield _with_baseline(item, scoring.score(task, cand, config, build_pool, diag, judges), base)

    return score_all


def remote_scorer(client: Any, options: dict[str, Any], task_ref: Callable[[str], Any],
                  baseline: str | None = None, deadline_s: float | None = None,
                  result_timeout_s: float = RESULT_TIMEOUT_S) -> Callable[[list[BatchItem]], Iterator[dict[str, Any]]]:
    """Submit every sample to a FarmClient (one or more daemons) and yield rows as results arrive."""

    def score_all(items: list[BatchItem]) -> Iterator[dict[str, Any]]:
        by_wire: dict[str, BatchItem] = {}
        base_wire: dict[str, str] = {}  # wire id -> task spec
        if baseline == "compile":
            from evalfarm.tasks.format import parse_task

            for spec in dict.fromkeys(it.task for it in items):
                ref = task_ref(spec)
                if ref.WhichOneof("kind") != "source":
                    log.warning("no compile baseline for %s: its source is not known here (use "
                                "--kernelbench-root or a task file)", spec)
                    continue
                task = parse_task(ref.source.source.decode(), ref.source.name or spec)
                sid = client.submit(ref, compile_candidate(task).source, f"baseline:{spec}", options=options,
                                    deadline_s=deadline_s)
                base_wire[sid] = spec
        for it in items:
            sid = client.submit(task_ref(it.task), it.source, it.sample_id, options=options, deadline_s=deadline_s)
            by_wire[sid] = it
        bases: dict[str, ScoreResult] = {}
        waiting: dict[str, list[tuple[BatchItem, ScoreResult]]] = {}
        for res in client.results(timeout=result_timeout_s):
            if res.sample_id in base_wire:
                spec = base_wire.pop(res.sample_id)
                bases[spec] = res.result
                for it, r in waiting.pop(spec, []):
                    yield _with_baseline(it, r, res.result)
                continue
            it = by_wire.pop(res.sample_id)
            if it.task in base_wire.values():
                waiting.setdefault(it.task, []).append((it, res.result))
                continue
            yield _with_baseline(it, res.result, bases.get(it.task))
        for spec_items in waiting.values():  # pragma: no cover - a baseline that never came back
            for it, r in spec_items:
                yield _with_baseline(it, r, None)

    return score_all
