"""The speed-mixture experiment driver (`learner experiment --config configs/speed_mixture.py`).

1. base: SFT + self-supervised on the program mixture (`<workdir>/base`), evaluated after each
   stage under the plain prompt and under the frozen exemplar prompt (`base/eval_exemplars.json`,
   shared by every arm, so all rows see identical prompts).
2. for each seed: the self-supervised checkpoint evaluated under that seed
   (`<workdir>/selfsup/seed<s>`), then each arm's RL from that checkpoint (`<workdir>/<arm>/seed<s>`):
   ``grpo`` (no exemplars), ``random`` (exemplars drawn uniformly), ``bucket`` (the paper's rule).
3. the report (`<workdir>/report.{txt,md,json,png}`): the paper's table per arm and seed, the
   share of each program emitted, and the two questions with 95% bootstrap intervals over
   (task, seed) cells:
   - does RL work? each arm's mean speedup (failures 0) minus the self-supervised checkpoint's,
     on the RL tasks, paired by (task, seed); and the share of the fast program;
   - does the contrastive prompt help? on held-out tasks under the {slow, fast} exemplar prompt,
     the share of samples that are the fast program, contrastive arm minus plain GRPO.

All runs share one farm cache (`<workdir>/farm-cache`), so one code gets one score, and one
process, so JAX compiles each shape once. Rerunning the command resumes: finished runs are
skipped.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from learner.config_check import TrainConfigError
from learner.report.speedups import write_report
from learner.report.stage_notes import cells, program_shares, program_table_md, program_table_text
from learner.report.stats import Interval, paired_difference
from learner.stages.evaluate import FORM_LABELS, eval_stage
from learner.stages.programs import measure_known_programs
from learner.stages.run import open_run
from learner.stages.state import load_stage_params
from learner.train import train

log = logging.getLogger(__name__)

ARMS = {"grpo": "plain GRPO (no exemplars)", "random": "contrastive RL, random exemplars",
        "bucket": "contrastive RL, bucket exemplars"}


def _derive(cfg: Any, **fields: Any) -> Any:
    out = cfg.copy_and_resolve_references()
    for path, value in fields.items():
        node = out
        *parents, last = path.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    return out


def arm_list(cfg: Any) -> list[str]:
    arms = [a.strip() for a in str(cfg.experiment.arms).split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        raise TrainConfigError(f"experiment.arms={cfg.experiment.arms!r}: use a comma list of {', '.join(ARMS)}")
    return arms


def _seed_tokenizer(base: Path, workdir: Path) -> None:
    """Every run of the experiment uses the base run's tokenizer (the checkpoints depend on it)."""
    src, dst = base / "tokenizer", workdir / "tokenizer"
    if src.is_dir() and not (dst / "tokenizer.json").is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, dst, dirs_exist_ok=True)


def _eval_selfsup(cfg: Any, ckpt: Path) -> None:
    """Evaluate the base's self-supervised checkpoint under `cfg.seed` (the arms' baseline)."""
    if (Path(cfg.workdir) / "eval" / "selfsup.json").is_file():
        return
    run = open_run(cfg)
    try:
        measure_known_programs(run)
        eval_stage(run, "selfsup", load_stage_params(run, ckpt))
    finally:
        run.close()


def _samples(path: Path) -> dict[str, list[dict[str, Any]]]:
    """{form: samples} of one eval/<stage>.json ({} when missing)."""
    if not path.is_file():
        return {}
    return {form: d["samples"] for form, d in json.loads(path.read_text()).get("forms", {}).items()}


def collect(root: Path, arms: Sequence[str], seeds: Sequence[int]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """{form: {row label: samples over all seeds}}, rows in pipeline order."""
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {}

    def add(label: str, by_form: Mapping[str, list[dict[str, Any]]]) -> None:
        for form, samples in by_form.items():
            rows.setdefault(form, {}).setdefault(label, []).extend(samples)

    add("after SFT", _samples(root / "base" / "eval" / "sft.json"))
    for s in seeds:
        add("after self-supervised", _samples(root / "selfsup" / f"seed{s}" / "eval" / "selfsup.json"))
    for arm in arms:
        for s in seeds:
            add(ARMS[arm], _samples(root / arm / f"seed{s}" / "eval" / "rl.json"))
    return rows


def _subset(samples: Sequence[Mapping[str, Any]], heldout: bool) -> list[Mapping[str, Any]]:
    return [s for s in samples if bool(s.get("heldout")) == heldout]


def evidence(rows: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]], arms: Sequence[str]) -> dict[str, Any]:
    """The two questions, with bootstrap intervals over (task, seed) cells."""
    out: dict[str, Any] = {"rl_vs_selfsup": {}, "fast_share_vs_selfsup": {}, "heldout_fast_vs_grpo": {}}
    for form, labelled in rows.items():
        base = _subset(labelled.get("after self-supervised", []), heldout=False)
        for arm in arms:
            samples = _subset(labelled.get(ARMS[arm], []), heldout=False)
            out["rl_vs_selfsup"][f"{arm} | {form}"] = paired_difference(cells(samples), cells(base))
            out["fast_share_vs_selfsup"][f"{arm} | {form}"] = paired_difference(
                cells(samples, "fast"), cells(base, "fast"))
    held = rows.get("exemplars", {})
    grpo = _subset(held.get(ARMS["grpo"], []), heldout=True)
    for arm in arms:
        if arm != "grpo":
            mine = _subset(held.get(ARMS[arm], []), heldout=True)
            out["heldout_fast_vs_grpo"][arm] = paired_difference(cells(mine, "fast"), cells(grpo, "fast"))
    return out


def _evidence_text(ev: Mapping[str, Mapping[str, Interval]]) -> str:
    lines = ["Does RL work? mean speedup (failures 0) of each arm minus the self-supervised checkpoint, "
             "RL tasks, paired by (task, seed):"]
    lines += [f"  {k}: {d.format('x')}{'  (excludes 0)' if d.excludes_zero else ''}"
              for k, d in ev["rl_vs_selfsup"].items()]
    lines += ["Share of the fast program, arm minus self-supervised (RL tasks):"]
    lines += [f"  {k}: {d.format()}{'  (excludes 0)' if d.excludes_zero else ''}"
              for k, d in ev["fast_share_vs_selfsup"].items()]
    lines += ["Does the contrastive prompt help? held-out tasks, {slow, fast} exemplar prompt: share of "
              "samples that are the fast program, arm minus plain GRPO:"]
    lines += [f"  {k}: {d.format()}{'  (excludes 0)' if d.excludes_zero else ''}"
              for k, d in ev["heldout_fast_vs_grpo"].items()] or ["  (no contrastive arm or no held-out task)"]
    every = [d for d in ev["rl_vs_selfsup"].values() if d.cells]
    works = bool(every) and all(d.excludes_zero and d.estimate > 0 for d in every)
    lines += ["", "Verdict: " + ("every RL arm beats the self-supervised checkpoint with a 95% CI excluding 0."
                                 if works else "not every RL arm beats the self-supervised checkpoint with a "
                                 "95% CI excluding 0 (a null or mixed result; see the intervals above).")]
    return "\n".join(lines) + "\n"


def per_seed_rows(root: Path, arms: Sequence[str], seeds: Sequence[int], form: str) -> dict[str, list[float | None]]:
    out: dict[str, list[float | None]] = {}
    for s in seeds:
        smp = _samples(root / "selfsup" / f"seed{s}" / "eval" / "selfsup.json").get(form)
        if smp:
            out[f"self-supervised, seed {s}"] = [x["speedup"] for x in smp]
    for arm in arms:
        for s in seeds:
            smp = _samples(root / arm / f"seed{s}" / "eval" / "rl.json").get(form)
            if smp:
                out[f"{arm}, seed {s}"] = [x["speedup"] for x in smp]
    return out


def experiment_report(root: Path, arms: Sequence[str], seeds: Sequence[int]) -> dict[str, Path]:
    from learner.report.speedups import format_table, summarize

    rows = collect(root, arms, seeds)
    speedups, verdicts = {}, {}
    for form, labelled in rows.items():
        for label, samples in labelled.items():
            key = f"{label} | {FORM_LABELS.get(form, form)}"
            speedups[key] = [s["speedup"] for s in samples]
            verdicts[key] = [s["verdict"] for s in samples]
    ev = evidence(rows, arms)
    text = _evidence_text(ev)
    md = "### The two questions\n\n```\n" + text + "```\n"
    for form, labelled in rows.items():
        name = FORM_LABELS.get(form, form)
        text += f"\nPrograms emitted ({name}; all tasks)\n" + program_table_text(labelled)
        md += f"\n### Programs emitted ({name}; all tasks)\n\n" + program_table_md(labelled)
        held = {k: _subset(v, heldout=True) for k, v in labelled.items()}
        if any(held.values()):
            text += f"\nPrograms emitted ({name}; held-out tasks)\n" + program_table_text(held)
            md += f"\n### Programs emitted ({name}; held-out tasks)\n\n" + program_table_md(held)
        seed_rows = {k: summarize(v) for k, v in per_seed_rows(root, arms, seeds, form).items()}
        if seed_rows:
            table = format_table(seed_rows, title=f"Per arm and seed ({name}; failures as 0)")
            text += "\n" + table
            md += f"\n### Per arm and seed ({name})\n\n```\n{table}```\n"
    extra = {"evidence": {k: {n: d.to_dict() for n, d in v.items()} for k, v in ev.items()},
             "program_shares": {f"{label} | {form}": program_shares(s) for form, lab in rows.items()
                                for label, s in lab.items()},
             "arms": list(arms), "seeds": list(seeds)}
    paths = write_report(root / "report", speedups, verdicts,
                         title="Speed-mixture experiment (failures count as 0)",
                         notes_text=text, notes_md=md, extra_json=extra)
    print("\n" + paths["txt"].read_text(), flush=True)
    print(f"report: {', '.join(str(p) for p in paths.values())}", flush=True)
    return paths


def run_experiment(cfg: Any) -> dict[str, Path]:
    if "experiment" not in cfg:
        raise TrainConfigError("this config has no experiment section: start from configs/speed_mixture.py")
    if cfg.experiment.short:
        from configs.speed_mixture import shorten

        cfg = cfg.copy_and_resolve_references()
        shorten(cfg)
    arms = arm_list(cfg)
    seeds = [int(cfg.seed) + i for i in range(int(cfg.experiment.seeds))]
    root = Path(cfg.workdir)
    if cfg.experiment.report_only:  # e.g. after a time limit: report the runs that finished
        return experiment_report(root, arms, seeds)
    cache = cfg.farm.local_cache_dir or str(root / "farm-cache")
    base = root / "base"
    log.info("experiment %s: base, then %d arm(s) x %d seed(s)", root, len(arms), len(seeds))
    train(_derive(cfg, workdir=str(base), stages="sft,selfsup", farm__local_cache_dir=cache))
    ckpt = base / "ckpt" / "selfsup"
    frozen = str(base / "eval_exemplars.json")
    for s in seeds:
        wd = root / "selfsup" / f"seed{s}"
        _seed_tokenizer(base, wd)
        _eval_selfsup(_derive(cfg, workdir=str(wd), seed=s, stages="selfsup", farm__local_cache_dir=cache,
                              eval__exemplars_from=frozen), ckpt)
        for arm in arms:
            wd = root / arm / f"seed{s}"
            _seed_tokenizer(base, wd)
            log.info("arm %s, seed %d", arm, s)
            train(_derive(
                cfg, workdir=str(wd), seed=s, stages="rl", init_from=str(ckpt), farm__local_cache_dir=cache,
                eval__exemplars_from=frozen, rl__num_exemplars=0 if arm == "grpo" else int(cfg.rl.num_exemplars),
                rl__exemplar_rule="random" if arm == "random" else "bucket"))
    return experiment_report(root, arms, seeds)
