"""The ``evalfarm`` command: score locally or on a farm, list tasks, serve, show status.

    evalfarm score --task L1/1 --candidate my_kernel.py [--device cpu|cuda[:N]] [--json]
    evalfarm tasks [--kernelbench-root DIR] [--lint [--device cpu|cuda] [--size-profile P]]
    evalfarm serve --port 50051 [--device cpu] ...
    evalfarm status --server HOST:PORT

Exit code 0 for any verdict; 2 when the tool itself cannot run (bad arguments, missing
file, unknown task), with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from evalfarm.config import ConfigError, ScoreConfig
from evalfarm.tasks.format import TaskFormatError

EXIT_USAGE = 2


def _add_score_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, help="task file, built-in id (L1/1) or name")
    p.add_argument("--candidate", required=True, help="candidate file with class ModelNew")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--inputs", type=int, default=None, help="correctness inputs (default 1000)")
    p.add_argument("--budget", type=float, default=None, help="timing budget in seconds (default 10)")
    p.add_argument("--tolerance", choices=["strict", "kernelbench"], default=None)
    p.add_argument("--guard-policy", choices=["honest", "paper", "strict", "permissive"], default=None,
                   help="which static findings decide alone (default: honest; paper = KernelBench's rules)")
    p.add_argument("--size-profile", default=None, help="task size profile (default: auto)")
    p.add_argument("--kernelbench-root", default=None, help="resolve --task in a KernelBench checkout")
    p.add_argument("--cache-dir", default=None, help="extension build cache (default ~/.cache/evalfarm)")
    p.add_argument("--server", default=None, help="score on a farm daemon HOST:PORT instead of locally")
    from evalfarm.client.cli import add_connection_arguments

    add_connection_arguments(p, token=True)  # --token-file, --tls-*, --timeout (with --server)


def _config_from(args: argparse.Namespace) -> ScoreConfig:
    changes: dict[str, object] = {"device": args.device}
    if args.inputs is not None:
        changes["num_correctness_inputs"] = args.inputs
    if args.budget is not None:
        changes["timing_budget_s"] = args.budget
    if args.tolerance is not None:
        changes["tolerance"] = args.tolerance
    if args.size_profile is not None:
        changes["size_profile"] = args.size_profile
    if args.guard_policy is not None:
        changes["guard_policy"] = args.guard_policy
    return ScoreConfig(**changes)  # type: ignore[arg-type]


def run_score(args: argparse.Namespace) -> int:
    if args.server:
        from evalfarm.client.cli import run_remote_score

        return run_remote_score(args)
    from evalfarm import scoring
    from evalfarm.build import BuildPool
    from evalfarm.tasks.format import Candidate, read_source
    from evalfarm.tasks.suite import resolve_task

    config = _config_from(args)
    task = resolve_task(args.task, args.kernelbench_root)
    # A broken candidate is a verdict (COMPILE_ERROR, LOAD_ERROR), so only reading it can fail here.
    candidate = Candidate(source=read_source(args.candidate, "candidate"), name=Path(args.candidate).stem,
                          path=str(args.candidate))
    task.resolve_profile(config.size_profile, "cpu" if config.device == "cpu" else "cuda")
    pool = BuildPool(max_workers=1, cache_dir=args.cache_dir) if args.cache_dir else None
    if not args.json:
        print(f"scoring {candidate.path} against {task.name} on {config.device} ...", file=sys.stderr)
    result = scoring.score(task, candidate, config, build_pool=pool)
    if args.json:
        print(result.to_json())
    else:
        print(scoring.describe(result))
    return 0


def run_tasks(args: argparse.Namespace) -> int:
    from evalfarm.tasks.suite import builtin_suite, kernelbench_suite

    suite = kernelbench_suite(args.kernelbench_root) if args.kernelbench_root else builtin_suite()
    rows = []
    entries = list(suite.entries)
    progress = None
    if args.lint:
        from tqdm import tqdm

        from evalfarm.tasks.lint import lint_task

        progress = tqdm(entries, desc="linting tasks", unit="task", file=sys.stderr, disable=None)
    for e in progress if progress is not None else entries:
        variants = suite.variants(e.task_id) if not args.kernelbench_root else []
        row: dict[str, object] = {"id": e.task_id, "name": e.name, "path": str(e.path),
                                  "variants": [f"{v.kind}_{v.devices}_{v.label}" for v in variants]}
        if args.lint:
            row["lint"] = lint_task(suite.load(e.task_id), args.device, args.size_profile).to_dict()
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
        return 0
    for row in rows:
        line = f"{row['id']:<8} {row['name']:<32} {len(row['variants'])} variants"  # type: ignore[arg-type]
        lint = row.get("lint")
        if isinstance(lint, dict):
            if not lint["loaded"]:
                line += f"  LOAD FAILED: {str(lint['error']).splitlines()[0][:200]}"
            elif lint["degenerate"]:
                line += f"  DEGENERATE: {lint['degenerate']}"
            else:
                line += f"  ok ({lint['profile']}, reference {lint['ref_ms']:.3f} ms)"
        print(line)
    if args.lint:
        bad = [r for r in rows if isinstance(r.get("lint"), dict) and not r["lint"]["ok"]]  # type: ignore[index]
        print(f"{len(rows) - len(bad)}/{len(rows)} tasks load and depend on their inputs"
              + (" (no speedup is paid on a degenerate task: docs/tasks.md)" if bad else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evalfarm", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_score_args(sub.add_parser("score", help="score a candidate against a task"))
    p_tasks = sub.add_parser("tasks", help="list tasks (and lint them)")
    p_tasks.add_argument("--kernelbench-root", default=None, help="list a KernelBench checkout instead of the built-in suite")
    p_tasks.add_argument("--json", action="store_true", help="print one JSON array")
    p_tasks.add_argument("--lint", action="store_true",
                         help="load every task and probe it: does its output depend on its inputs (degenerate tasks)?")
    p_tasks.add_argument("--device", default="cpu", help="device for --lint: cpu, cuda or cuda:N (default: cpu)")
    p_tasks.add_argument("--size-profile", default="auto", help="size profile for --lint (default: auto)")
    p_serve = sub.add_parser("serve", help="run a farm daemon")
    p_status = sub.add_parser("status", help="show a daemon's capacity and health")
    try:
        from evalfarm.server.cli import add_serve_arguments

        add_serve_arguments(p_serve)
    except ImportError:
        pass
    try:
        from evalfarm.client.cli import add_status_arguments

        add_status_arguments(p_status)
    except ImportError:
        pass
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        if args.command == "score":
            return run_score(args)
        if args.command == "tasks":
            return run_tasks(args)
        if args.command == "serve":
            from evalfarm.server.cli import run_serve

            return run_serve(args)
        if args.command == "status":
            from evalfarm.client.cli import run_status

            return run_status(args)
    except (TaskFormatError, ConfigError, FileNotFoundError) as err:
        print(f"evalfarm: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as err:
        print(f"evalfarm: error: {args.command} is not available: {err}", file=sys.stderr)
        return EXIT_USAGE
    parser.error(f"unknown command {args.command}")
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
