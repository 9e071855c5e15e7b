"""`learner` console script.

    learner train --config configs/demo.py [--config.rl.group_size=16 ...]
    learner eval  --config configs/demo.py --checkpoint runs/demo/ckpt/rl [--contrastive]
    learner exemplars --db runs/demo/exemplars.sqlite [--task L1/1] [--top 5] [--export DIR]
    learner bench ...

`train` and `eval` read an ml-collections config file (`get_config()`), locked, with
``--config.<field>=value`` overrides; the other subcommands use plain argparse.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

USAGE = __doc__ or ""


def _setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s %(message)s")
    for noisy in ("absl", "orbax", "jax._src", "grpc"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _config_flags(command: str, argv: list[str]) -> tuple[object, object]:
    from absl import flags
    from ml_collections import config_flags

    fv = flags.FlagValues()
    # sys_argv: override flags (--config.x.y=...) are registered from the argv we parse, not from
    # the process's own sys.argv (they differ when main() is called programmatically).
    config_flags.DEFINE_config_file("config", None, "config file with get_config()", flag_values=fv,
                                    lock_config=True, sys_argv=[f"learner {command}", *argv])
    if command == "eval":
        flags.DEFINE_string("checkpoint", None, "stage checkpoint directory", flag_values=fv)
        flags.DEFINE_integer("step", None, "checkpoint step (default: latest)", flag_values=fv)
        flags.DEFINE_boolean("contrastive", False, "contrastive prompts with exemplars from the run's DB",
                             flag_values=fv)
        flags.DEFINE_string("out", None, "report path prefix (default: <workdir>/eval/<name>)", flag_values=fv)
    try:
        fv([f"learner {command}", *argv])
    except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as err:
        # a misspelt or mistyped --config.<field> override lands here, with a "did you mean"
        raise SystemExit(f"learner {command}: bad config override: {err}") from None
    if fv.config is None:
        raise SystemExit(f"learner {command}: --config is required (e.g. --config configs/demo.py)")
    return fv.config, fv


def _share_gpu_with_local_farm(cfg: object) -> None:
    """Local farm daemons score on this host's GPUs: JAX must not grab most of their memory."""
    if not cfg.farm.endpoints:  # type: ignore[attr-defined]
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _train(argv: list[str]) -> int:
    from learner.train import TrainConfigError, train

    cfg, _ = _config_flags("train", argv)
    _share_gpu_with_local_farm(cfg)
    try:
        train(cfg)
    except TrainConfigError as err:
        print(f"learner train: {err}", file=sys.stderr)
        return 2
    return 0


def _eval(argv: list[str]) -> int:
    from learner import train as tr
    from learner.exemplars import ExemplarDB
    from learner.report import format_table, write_report

    cfg, fv = _config_flags("eval", argv)
    _share_gpu_with_local_farm(cfg)
    if not fv.checkpoint:
        print("learner eval: --checkpoint is required (a stage checkpoint directory)", file=sys.stderr)
        return 2
    run = tr.open_run(cfg, record_config=False)
    try:
        params = tr.load_stage_params(run, Path(fv.checkpoint), fv.step)
        name = Path(fv.checkpoint).name
        with ExemplarDB(run.workdir / "eval.sqlite") as edb:
            summary, samples = tr.evaluate(
                run, params, f"cli-{name}-{time.strftime('%Y%m%d-%H%M%S')}", contrastive=fv.contrastive,
                samples_per_task=int(cfg.eval.samples_per_task),
                temperature=float(cfg.eval.temperature), db=edb)
        label = f"{name} ({'contrastive' if fv.contrastive else 'plain'} prompts)"
        prefix = Path(fv.out) if fv.out else run.workdir / "eval" / f"cli-{name}"
        paths = write_report(prefix, {label: summary}, {label: [s["speedup"] for s in samples if s["speedup"]]},
                             {label: [s["verdict"] for s in samples]})
        print(format_table({label: summary}))
        print(f"report: {', '.join(str(p) for p in paths.values())}")
    except tr.TrainConfigError as err:
        print(f"learner eval: {err}", file=sys.stderr)
        return 2
    finally:
        run.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("train", "eval"):
        _setup_logging()
        return _train(argv[1:]) if argv[0] == "train" else _eval(argv[1:])

    parser = argparse.ArgumentParser(prog="learner", description=USAGE,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("train", help="run or resume the configured training pipeline (--config FILE)")
    sub.add_parser("eval", help="the paper's speedup table for a checkpoint (--config, --checkpoint)")

    from learner import bench, exemplars_cli

    bench.build_parser(sub.add_parser("bench", help="training MFU / decode throughput benchmark"))
    exemplars_cli.build_parser(sub.add_parser("exemplars", help="inspect and export the exemplar database"))

    args = parser.parse_args(argv)
    _setup_logging()
    if args.command == "bench":
        return bench.run_and_print(args)
    if args.command == "exemplars":
        return exemplars_cli.run(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
