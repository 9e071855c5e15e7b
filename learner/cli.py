"""`learner` console script.

    learner train --config configs/demo.py [--config.rl.group_size=16 ...]
    learner eval  --config configs/demo.py --checkpoint runs/demo/ckpt/rl [--prompts plain,exemplars]
    learner export --checkpoint runs/demo/ckpt/rl --out hf/demo-rl
    learner experiment --config configs/speed_mixture.py [--config.experiment.seeds=3 ...]
    learner exemplars --db runs/demo/exemplars.sqlite [--task L1/1] [--top 5] [--export DIR]
    learner bench ...

`train`, `eval` and `experiment` read an ml-collections config file (`get_config()`), locked,
with ``--config.<field>=value`` overrides (`learner train --help` lists every field, its
default, its allowed values and its one-line description); the other subcommands use plain
argparse.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

USAGE = __doc__ or ""

CONFIG_COMMANDS = ("train", "eval", "experiment")

_EXAMPLES = {
    "train": "  learner train --config configs/demo.py --config.workdir=runs/mine --config.rl.steps=10",
    "eval": ("  learner eval --config configs/demo.py --checkpoint runs/demo/ckpt/rl\n"
             "  learner eval --config configs/demo.py --checkpoint runs/demo/ckpt/sft --prompts plain"),
    "experiment": "  learner experiment --config configs/speed_mixture.py --config.experiment.seeds=3",
}
_SUMMARY = {
    "train": "Run (or resume) the configured pipeline: SFT, self-supervised, contrastive RL.",
    "eval": "The paper's speedup table for one stage checkpoint, under the run's evaluation prompts.",
    "experiment": ("The speed-mixture experiment: one SFT + self-supervised base, then RL arms "
                   "(plain GRPO, random exemplars, bucket exemplars) x seeds, and its report."),
}


def _setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s %(message)s")
    for noisy in ("absl", "orbax", "jax._src", "grpc"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _config_arg(argv: list[str]) -> str | None:
    for i, a in enumerate(argv):
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--config="):
            return a.split("=", 1)[1]
    return None


def _help(command: str, argv: list[str]) -> str:
    """Usage of a config command: the commands, every config field with its default and allowed
    values (of --config's file when given, else configs/common.py), and an example."""
    from learner.config_check import describe_fields
    from learner.config_docs import descriptions_for

    path = _config_arg(argv)
    cfg, source = None, "configs/common.py"
    if path and Path(path).is_file():
        try:
            from learner.config_check import load_config_file

            cfg, source = load_config_file(path), path
        except Exception:  # noqa: BLE001 - a broken file: fall back to the defaults
            cfg = None
    if cfg is None:
        from configs.common import base_config

        cfg = base_config()
        if command == "experiment":
            from configs.speed_mixture import get_config

            cfg, source = get_config(), "configs/speed_mixture.py"
    lines = [f"usage: learner {command} --config FILE [--config.<field>=<value> ...]"
             + (" --checkpoint DIR [--step N] [--prompts FORMS] [--out PREFIX]" if command == "eval" else ""),
             "", _SUMMARY[command], "",
             "commands: train, eval, export, experiment, exemplars, bench (learner <command> --help)", ""]
    if command == "eval":
        lines += ["options:",
                  "  --checkpoint DIR   a stage checkpoint directory (<workdir>/ckpt/<stage>)",
                  "  --step N           checkpoint step (default: latest)",
                  "  --prompts FORMS    comma list of plain, exemplars (default: config.eval.prompts)",
                  "  --out PREFIX       report path prefix (default: <workdir>/eval/cli-<name>)", ""]
    own = [source] if Path(source).is_file() and Path(source).name != "common.py" else []
    lines += [f"config fields, each with its default (from {source}) and its description (from "
              f"configs/common.py{f' and {source}' if own else ''}):",
              *describe_fields(cfg, descriptions_for(*own)), "",
              "example:", _EXAMPLES[command]]
    return "\n".join(lines) + "\n"


def _one_line(err: BaseException) -> str:
    """The error's message on one line (a KeyError's message, not its escaped repr)."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, KeyError) and seen.args:
            return " ".join(str(seen.args[0]).split())
        seen = seen.__cause__ or seen.__context__
    msg = str(err)
    if "\\n" in msg or "\\'" in msg:  # a message that embeds another error's repr
        msg = msg.replace("\\n", " ").replace("\\'", "'")
    return " ".join(msg.split()).replace("''", "'")


def _config_flags(command: str, argv: list[str]) -> tuple[object, object]:
    from absl import flags
    from ml_collections import config_flags

    path = _config_arg(argv)
    if path is None:
        raise SystemExit(f"learner {command}: --config is required (e.g. --config configs/demo.py); "
                         f"see learner {command} --help")
    if not Path(path).is_file():
        raise SystemExit(f"learner {command}: config file {path} does not exist")
    fv = flags.FlagValues()
    # sys_argv: override flags (--config.x.y=...) are registered from the argv we parse, not from
    # the process's own sys.argv (they differ when main() is called programmatically).
    config_flags.DEFINE_config_file("config", None, "config file with get_config()", flag_values=fv,
                                    lock_config=True, sys_argv=[f"learner {command}", *argv])
    if command == "eval":
        flags.DEFINE_string("checkpoint", None, "stage checkpoint directory", flag_values=fv)
        flags.DEFINE_integer("step", None, "checkpoint step (default: latest)", flag_values=fv)
        flags.DEFINE_string("prompts", None, "evaluation prompt forms", flag_values=fv)
        flags.DEFINE_string("out", None, "report path prefix (default: <workdir>/eval/<name>)", flag_values=fv)
    try:
        fv([f"learner {command}", *argv])
        cfg = fv.config
    except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as err:
        # a misspelt or mistyped --config.<field> override lands here, with a "did you mean"
        raise SystemExit(f"learner {command}: bad config override: {_one_line(err)}") from None
    except Exception as err:  # noqa: BLE001 - the config file itself failed to load
        raise SystemExit(f"learner {command}: cannot load {path}: {_one_line(err)}") from None
    from learner.config_check import TrainConfigError, validate_config

    try:
        validate_config(cfg)
    except TrainConfigError as err:
        raise SystemExit(f"learner {command}: {err}") from None
    return cfg, fv


def _share_gpu_with_local_farm(cfg: object) -> None:
    """Local farm daemons score on this host's GPUs: JAX must not grab most of their memory."""
    if not cfg.farm.endpoints:  # type: ignore[attr-defined]
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _run_config(command: str, run: Callable[[Any], Any], argv: list[str]) -> int:
    """`learner train` and `learner experiment`: a config from the flags, run; a bad config exits 2."""
    from learner.config_check import TrainConfigError

    cfg, _ = _config_flags(command, argv)
    _share_gpu_with_local_farm(cfg)
    try:
        run(cfg)
    except TrainConfigError as err:
        _leave_if_multi_process(2, f"learner {command}: {err}")
        print(f"learner {command}: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        import traceback

        traceback.print_exc()
        _leave_if_multi_process(1, f"learner {command}: {_process_name()} stops: {type(err).__name__}: "
                                   f"{str(err).splitlines()[0] if str(err) else ''} (in a multi-process run "
                                   "this often means another process died: see its log; every process stops)")
        raise
    return 0


def _process_name() -> str:
    import jax

    return f"process {jax.process_index()} of {jax.process_count()}"


def _leave_if_multi_process(code: int, message: str) -> None:
    """In a multi-process job, exit at once (`learner.runtime.distributed.leave_job`)."""
    if "jax" not in sys.modules:
        return
    import jax

    if jax.process_count() > 1:
        from learner.runtime.distributed import leave_job

        leave_job(code, message)


def _train(argv: list[str]) -> int:
    from learner.train import train

    return _run_config("train", train, argv)


def _experiment(argv: list[str]) -> int:
    from learner.experiment import run_experiment

    return _run_config("experiment", run_experiment, argv)


def _eval(argv: list[str]) -> int:
    from learner.config_check import EVAL_FORMS, TrainConfigError
    from learner.report.speedups import format_table, write_report
    from learner.report.stage_notes import stage_notes
    from learner.rl.exemplars import ExemplarDB
    from learner.stages.evaluate import FORM_LABELS, evaluate
    from learner.stages.programs import measure_known_programs
    from learner.stages.run import open_run
    from learner.stages.state import load_stage_params

    cfg, fv = _config_flags("eval", argv)
    _share_gpu_with_local_farm(cfg)
    if not fv.checkpoint:
        print("learner eval: --checkpoint is required (a stage checkpoint directory)", file=sys.stderr)
        return 2
    forms = [f.strip() for f in (fv.prompts or cfg.eval.prompts).split(",") if f.strip()]
    bad = [f for f in forms if f not in EVAL_FORMS]
    if bad or not forms:
        print(f"learner eval: --prompts takes a comma list of {', '.join(EVAL_FORMS)}", file=sys.stderr)
        return 2
    run = open_run(cfg, record_config=False)
    try:
        params = load_stage_params(run, Path(fv.checkpoint), fv.step)
        measure_known_programs(run)  # the frozen exemplars and program names read their scores
        name = Path(fv.checkpoint).name
        speedups, verdicts, labelled, rows = {}, {}, {}, {}
        with ExemplarDB(run.workdir / "eval.sqlite") as edb:
            for form in forms:
                summary, samples = evaluate(
                    run, params, f"cli-{name}-{time.strftime('%Y%m%d-%H%M%S')}", form=form,
                    samples_per_task=int(cfg.eval.samples_per_task),
                    temperature=float(cfg.eval.temperature), db=edb)
                label = f"{name} | {FORM_LABELS[form]}"
                rows[label] = summary
                labelled[label] = samples
                speedups[label] = [s["speedup"] for s in samples]
                verdicts[label] = [s["verdict"] for s in samples]
        prefix = Path(fv.out) if fv.out else run.workdir / "eval" / f"cli-{name}"
        text, md = stage_notes(labelled, "per prompt form")
        paths = write_report(prefix, speedups, verdicts, notes_text=text, notes_md=md)
        print(format_table(rows))
        print(f"report: {', '.join(str(p) for p in paths.values())}")
    except TrainConfigError as err:
        print(f"learner eval: {err}", file=sys.stderr)
        return 2
    finally:
        run.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in CONFIG_COMMANDS:
        if any(a in ("-h", "--help", "-help", "--helpfull") for a in argv[1:]):
            print(_help(argv[0], argv[1:]), end="")
            return 0
        _setup_logging()
        return {"train": _train, "eval": _eval, "experiment": _experiment}[argv[0]](argv[1:])

    parser = argparse.ArgumentParser(prog="learner", description=USAGE,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in CONFIG_COMMANDS:
        sub.add_parser(name, help=f"{_SUMMARY[name]} (learner {name} --help)")

    from learner import exemplars_cli, export
    from learner.bench import throughput

    export.build_parser(sub.add_parser("export", help="write a stage checkpoint as a Hugging Face model directory"))
    throughput.build_parser(sub.add_parser("bench", help="training MFU / decode throughput benchmark"))
    exemplars_cli.build_parser(sub.add_parser("exemplars", help="inspect and export the exemplar database"))

    args = parser.parse_args(argv)
    _setup_logging()
    if args.command == "export":
        return export.run(args)
    if args.command == "bench":
        return throughput.run_and_print(args)
    if args.command == "exemplars":
        return exemplars_cli.run(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
