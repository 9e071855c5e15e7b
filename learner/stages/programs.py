"""The task set's known programs: SFT targets, the seeds of the exemplar buckets and of the frozen
evaluation exemplars, and the names the report gives the programs a policy emits.
`measure_known_programs` scores them on the farm once per workdir."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from learner.rl.exemplars import SampleRecord
from learner.rl.prompts import PROMPT_VERSION
from learner.rl.tasks import Program, sft_pairs_for, task_programs
from learner.runtime import controller
from learner.stages.run import Run, farm_device

log = logging.getLogger(__name__)


def measure_known_programs(run: Run) -> dict[str, float]:
    """With `sft.measure_targets`, score the known programs on the farm (`measure_programs`) and
    keep their speedups in `run.measured` (code sha -> speedup; else it stays empty). Called once
    before any stage (`train`), and by the paths that evaluate without training."""
    if run.cfg.sft.measure_targets:
        progs = known_programs(run)
        # process 0 scores them and keeps them in its database; every process gets the speedups
        run.measured = controller.share("known-programs", lambda: measure_programs(run, progs) if progs else {})
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
