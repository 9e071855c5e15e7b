"""Evaluation of a stage's final policy under every configured prompt form (the plain prompt, and
the contrastive prompt with the run's frozen exemplars), kept in <workdir>/eval/<stage>.json;
and the final report over the stages' evaluations. Across processes every process samples its
share of the rows; process 0 picks the frozen exemplars, scores, stores and writes the files."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from learner.config_check import EVAL_FORMS, TrainConfigError
from learner.report.speedups import SpeedupSummary, format_table, summarize, write_report
from learner.report.stage_notes import stage_notes
from learner.rl.exemplars import ExemplarDB, code_sha256
from learner.rl.prompts import Exemplar
from learner.rl.rollout import Prompt, generate_rollouts, repeat_prompt
from learner.runtime import controller
from learner.stages.programs import known_programs
from learner.stages.run import Run
from learner.stages.samples import (
    jax_key,
    make_sampler,
    prompt_ids,
    sample_records,
    score_rollouts,
    wait_outcomes,
)
from learner.stages.specs import stage_label

log = logging.getLogger(__name__)


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
    data = controller.share("frozen-exemplars", lambda: _frozen_exemplar_data(run))
    return {t: [Exemplar(e["code"], float(e["speedup"])) for e in ex] for t, ex in data.items()}


def _frozen_exemplar_data(run: Run) -> dict[str, list[dict[str, Any]]]:
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
    return data


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
    controller.share("farm", run.start_farm)  # a farm that cannot start stops every process
    sampler = make_sampler(run, params)
    frozen = frozen_exemplars(run) if form == "exemplars" else {}
    names = _program_names(run)
    prompts: list[Prompt] = []
    for g, t in enumerate(run.tasks):
        fitted = prompt_ids(run, t, list(frozen.get(t.task_id, [])) if form == "exemplars" else None)
        if fitted is not None:
            prompts += repeat_prompt(f"eval-{label}-{form}", t.task_id, g, fitted[0], samples_per_task)
    rollouts, _ = generate_rollouts(sampler, run.tokenizer, prompts, run.sampling(temperature),
                                    jax_key(run, 0, 9), policy_version=-1,
                                    batch_size=int(run.cfg.sampling.batch_size))
    outcomes, _ = wait_outcomes(run, rollouts, score_rollouts(run, rollouts, f"eval:{label}"))
    if db is not None and controller.is_controller():
        db.add_many(sample_records(rollouts, outcomes, {}, 0, f"eval:{label}:{form}"))
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


def eval_pending(run: Run, stage: str) -> bool:
    return bool(run.cfg.eval.after_each_stage) and not _eval_path(run, stage).is_file()


def eval_stage(run: Run, stage: str, params: Any) -> None:
    """Evaluate the stage's final policy under every configured prompt form (once: see
    `eval_pending`)."""
    out = _eval_path(run, stage)
    label = stage_label(run.cfg, stage)
    log.info("evaluating the policy %s", label)
    forms, rows = {}, {}
    edb = ExemplarDB(run.workdir / "eval.sqlite") if controller.is_controller() else None
    try:
        for form in eval_forms(run.cfg):
            summary, samples = evaluate(run, params, stage, form=form,
                                        samples_per_task=int(run.cfg.eval.samples_per_task),
                                        temperature=float(run.cfg.eval.temperature), db=edb)
            forms[form] = {"summary": summary.to_dict(), "samples": samples}
            rows[f"{label} | {FORM_LABELS[form]}"] = summary
    finally:
        if edb is not None:
            edb.close()
    if not controller.is_controller():
        return
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
