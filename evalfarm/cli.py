"""The ``evalfarm`` command: score locally or on a farm, list tasks, serve, show status.

    evalfarm score --task L1/1 --candidate my_kernel.py [--device cpu|cuda[:N]] [--json]
    evalfarm score --candidates DIR|FILE.jsonl --out results.jsonl [--server H:P[,H:P...]] [--baseline compile]
    evalfarm score --task L1/1 --candidates DIR_OF_PY_FILES --out results.jsonl
    evalfarm score ... [--profile [DIR]] [--save-failing-input DIR] [--require-other-sizes | --no-other-sizes]
    evalfarm tasks [--kernelbench-root DIR] [--lint [--device cpu|cuda] [--size-profile P]]
    evalfarm serve --port 50051 [--device cpu] ...
    evalfarm status --server HOST:PORT

Exit code 0 for any verdict (1 when a verdict named by --fail-on occurred); 2 when the tool
itself cannot run (bad arguments, missing file, unknown task, no GPU for --device cuda), with
the reason on stderr; 130 when Ctrl-C or SIGTERM stopped `score` or `tasks` (one line says what
was kept; nothing it started is left running).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from evalfarm.cli_help import HelpFormatter
from evalfarm.config import ConfigError
from evalfarm.tasks.format import TaskFormatError

EXIT_USAGE = 2
EXIT_FAIL_ON = 1
FORMATTER = HelpFormatter

log = logging.getLogger(__name__)


class ToolError(Exception):
    """The command cannot run here (exit code 2); the message says why."""


def _add_score_args(p: argparse.ArgumentParser) -> None:
    from evalfarm import score_options
    from evalfarm.build.cache import DEFAULT_CACHE_DIR

    p.add_argument("--task", default=None,
                   help="task file, built-in id (L1/1) or name; with --candidates DIR of *.py files, the task "
                        "they are all scored against")
    p.add_argument("--candidate", default=None, help="candidate file with class ModelNew (one candidate)")
    p.add_argument("--candidates", default=None, metavar="FILE.jsonl|DIR",
                   help="batch: a JSONL file ({task, candidate, sample_id}), a run directory "
                        "level*/problem_*/sample_*.py, or with --task a directory of *.py candidates "
                        "(README.md, \"Scoring a whole run\")")
    p.add_argument("--out", default=None, metavar="FILE.jsonl",
                   help="batch: results JSONL, appended to and resumed from")
    p.add_argument("--table-csv", default=None, metavar="FILE", help="batch: also write the summary table as CSV here")
    p.add_argument("--table-md", default=None, metavar="FILE",
                   help="batch: also write the summary table as Markdown here")
    p.add_argument("--baseline", choices=["compile"], default=None,
                   help="also score torch.compile(Model) of each task and report speedups over it")
    p.add_argument("--profile", nargs="?", const="", default=None, metavar="DIR",
                   help="save a torch profiler trace of one candidate call (and an Nsight Compute report where "
                        "ncu is on PATH) in DIR (DIR left out: ./evalfarm-profile, or <out>_profile/ for a batch); "
                        "local scoring only")
    p.add_argument("--save-failing-input", default=None, metavar="DIR",
                   help="write the inputs and both outputs of the first failing correctness round to DIR "
                        "(torch.save files and failing_input.json); local scoring only")
    p.add_argument("--fail-on", default=None, metavar="VERDICTS",
                   help="comma list of verdicts (e.g. INCORRECT,HACK_DETECTED) that make the exit code 1")
    p.add_argument("--json", action="store_true",
                   help="print exactly one JSON object (a batch: one JSON array of the summary rows)")
    score_options.add_arguments(p)
    p.add_argument("--kernelbench-root", default=None, metavar="DIR", help="resolve --task in a KernelBench checkout")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR), metavar="DIR",
                   help="cache root shared with `evalfarm serve` (builds in <dir>/build; $EVALFARM_CACHE_DIR)")
    p.add_argument("--server", default=None, metavar="HOST:PORT",
                   help="score on farm daemons HOST:PORT (a comma list for a batch) instead of locally")
    from evalfarm.client.cli import DEFAULT_REMOTE_TIMEOUT_S, add_connection_arguments
    from evalfarm.engineer.batch_score import RESULT_TIMEOUT_S

    # --token-file, --tls-*, --timeout (with --server)
    add_connection_arguments(p, token=True, timeout_s=f"{DEFAULT_REMOTE_TIMEOUT_S:g} for one candidate; in a batch, "
                                                      f"{RESULT_TIMEOUT_S:g} for each next result")


def _fail_on(args: argparse.Namespace) -> set[str]:
    from evalfarm.verdict import Verdict

    names = {v.strip().upper() for v in (args.fail_on or "").split(",") if v.strip()}
    unknown = names - {v.value for v in Verdict}
    if unknown:
        raise ToolError(f"--fail-on: unknown verdict(s) {', '.join(sorted(unknown))} "
                        f"(use {', '.join(v.value for v in Verdict)})")
    return names


def check_device(device: str) -> None:
    """ToolError when ``device`` is a GPU this host does not have (without initialising CUDA here)."""
    if not device.startswith("cuda"):
        return
    from evalfarm.devices import list_gpus

    gpus = list_gpus()
    index = int(device.split(":")[1]) if ":" in device else 0
    if not gpus:
        raise ToolError(f"--device {device}: no NVIDIA GPU is visible on this host (nvidia-smi lists none)")
    if index >= len(gpus):
        raise ToolError(f"--device {device}: this host has {len(gpus)} GPU(s) (cuda:0..cuda:{len(gpus) - 1})")


def check_judge_interpreter() -> None:
    """ToolError when the judges' Python cannot import what every judge imports (evalfarm.judge.interpreter)."""
    from evalfarm.judge import interpreter

    try:
        interpreter.require()
    except interpreter.JudgeInterpreterError as err:
        raise ToolError(str(err)) from None


def _diagnostics_root(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    """(profile dir, failing-input dir) asked for on the command line; ToolError with --server."""
    if args.profile is None and args.save_failing_input is None:
        return None, None
    if args.server:
        raise ToolError("--profile and --save-failing-input work with local scoring only (not with --server)")
    profile = None
    if args.profile is not None:
        if args.profile:
            profile = Path(args.profile)
        elif args.candidates and args.out:
            profile = Path(args.out).with_name(Path(args.out).stem + "_profile")
        else:
            profile = Path("evalfarm-profile")
    return profile, Path(args.save_failing_input) if args.save_failing_input else None


def run_score(args: argparse.Namespace) -> int:
    fail_on = _fail_on(args)
    profile_dir, failing_dir = _diagnostics_root(args)
    if args.candidates:
        if args.candidate:
            raise ToolError("give --candidate (one candidate) or --candidates (a batch), not both")
        return run_batch_score(args, fail_on)
    if not (args.task and args.candidate):
        raise ToolError("give --task and --candidate (one candidate), or --candidates and --out (a batch)")
    if args.server:
        from evalfarm.client.cli import run_remote_score

        verdict = run_remote_score(args)  # None when it cannot run (said on stderr)
        if verdict is None:
            return EXIT_USAGE
        return EXIT_FAIL_ON if verdict.value in fail_on else 0
    from evalfarm import score_options, scoring
    from evalfarm.build import BuildPool
    from evalfarm.interrupt import Interrupted
    from evalfarm.judge.diagnose import Diagnostics
    from evalfarm.result import describe
    from evalfarm.score_progress import PhasePrinter, banner
    from evalfarm.tasks.format import Candidate, read_source
    from evalfarm.tasks.suite import resolve_task

    config = score_options.local_config(args)
    check_device(config.device)
    check_judge_interpreter()
    task = resolve_task(args.task, args.kernelbench_root)
    # A broken candidate is a verdict (COMPILE_ERROR, LOAD_ERROR), so only reading it can fail here.
    candidate = Candidate(source=read_source(args.candidate, "candidate"), name=Path(args.candidate).stem,
                          path=str(args.candidate))
    profile = task.resolve_profile(config.size_profile, "cpu" if config.device == "cpu" else "cuda")
    diagnostics = Diagnostics(str(profile_dir) if profile_dir else None, str(failing_dir) if failing_dir else None)
    progress = None
    if not args.json:
        print(banner(str(candidate.path), task, config, profile), file=sys.stderr, flush=True)
        progress = PhasePrinter(config)
    pool = BuildPool(max_workers=1, cache_dir=Path(args.cache_dir) / "build")
    try:
        evaluation = scoring.start(task, candidate, config, pool, diagnostics, progress=progress)
        result = scoring.waiting(evaluation)
    except KeyboardInterrupt:
        raise Interrupted(f"no result for {candidate.path} (its evaluation was stopped); "
                          "run the same command to score it") from None
    finally:
        pool.close()
    if args.json:
        print(result.to_json())
    else:
        print(describe(result))
    return EXIT_FAIL_ON if result.verdict.value in fail_on else 0


def run_batch_score(args: argparse.Namespace, fail_on: set[str]) -> int:
    """``score --candidates``: every sample scored once into --out, then the summary table."""
    from evalfarm.engineer import batch

    if not args.out:
        raise ToolError("--candidates needs --out FILE.jsonl (results are appended there and resumed from)")
    if args.server:
        batch_scorer = _remote_batch_scorer(args)
    else:
        batch_scorer = _local_batch_scorer(args)
    try:
        items = batch.read_candidates(args.candidates, args.task, check_task=batch_scorer.check_task)
        say = (lambda line: print(line, file=sys.stderr, flush=True)) if not args.json else log.info
        rows = batch.run_batch(items, args.out, batch_scorer.score_all, batch_scorer.identity,
                               progress=not args.json, say=say)
    finally:
        batch_scorer.close()
    summary = batch.summarise(rows)
    if args.table_csv:
        Path(args.table_csv).write_text(batch.format_csv(summary))
    if args.table_md:
        Path(args.table_md).write_text(batch.format_markdown(summary))
    if args.json:
        print(json.dumps([s.to_dict() for s in summary]))
    else:
        print(batch.format_table(summary))
    return EXIT_FAIL_ON if any(r.get("verdict") in fail_on for r in rows) else 0


@dataclasses.dataclass
class BatchScorer:
    """Where a batch is scored: its task check, its scorer, each sample's identity and its cleanup."""

    check_task: Callable[[str], object]  # raises for a task that cannot be scored
    score_all: Callable[[list[Any]], Iterator[dict[str, Any]]]
    identity: Callable[[Any], Any]  # BatchItem -> evalfarm.engineer.batch_resume.Identity
    close: Callable[[], None]


def _local_batch_scorer(args: argparse.Namespace) -> BatchScorer:
    from evalfarm import score_options
    from evalfarm.build import BuildPool
    from evalfarm.engineer.batch_resume import Identity
    from evalfarm.engineer.batch_score import local_scorer
    from evalfarm.tasks.suite import resolve_task

    config = score_options.local_config(args)
    check_device(config.device)
    check_judge_interpreter()
    tasks: dict[str, Any] = {}

    def resolve(spec: str) -> Any:
        if spec not in tasks:
            task = resolve_task(spec, args.kernelbench_root)
            task.resolve_profile(config.size_profile, "cpu" if config.device == "cpu" else "cuda")
            tasks[spec] = task
        return tasks[spec]

    scoring_options = {**config.to_dict(), "baseline": args.baseline}
    # Builds run ahead, in parallel (half the cores: nvcc is itself multi-threaded at times).
    pool = BuildPool(max_workers=max(1, (os.cpu_count() or 2) // 2), cache_dir=Path(args.cache_dir) / "build")
    score_all = local_scorer(config, resolve, args.baseline, pool, _batch_diagnostics(*_diagnostics_root(args)))
    return BatchScorer(resolve, score_all,
                       lambda item: Identity(resolve(item.task).sha256, item.sha256, scoring_options), pool.close)


def _batch_diagnostics(profile: Path | None, failing: Path | None) -> object:
    """Per-sample diagnostics directories for a batch: <dir>/<sample id, made a safe name>."""
    if profile is None and failing is None:
        return None
    import re

    from evalfarm.judge.diagnose import Diagnostics

    def for_item(item: object) -> Diagnostics:
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", str(getattr(item, "sample_id", "sample"))).strip("._") or "sample"
        return Diagnostics(str(profile / name) if profile else None, str(failing / name) if failing else None)

    return for_item


def _remote_batch_scorer(args: argparse.Namespace) -> BatchScorer:
    from evalfarm import score_options
    from evalfarm.client import FarmClient
    from evalfarm.client.cli import ToolError as RemoteToolError
    from evalfarm.client.cli import _tls_from, _token_from
    from evalfarm.engineer.batch_resume import Identity
    from evalfarm.engineer.batch_score import RESULT_TIMEOUT_S, remote_scorer
    from evalfarm.tasks.suite import resolve_task
    from evalfarm.v1 import evalfarm_pb2 as pb

    try:
        token, tls = _token_from(args), _tls_from(args)
    except RemoteToolError as err:
        raise ToolError(str(err)) from None
    refs: dict[str, Any] = {}

    def task_ref(spec: str) -> Any:
        # A task the client can read (a file, or a KernelBench id with --kernelbench-root) is sent
        # by content; a bare name is resolved by the daemon (and its content is not known here).
        if spec not in refs:
            p = Path(spec)
            if p.suffix == ".py" or p.exists() or args.kernelbench_root:
                t = resolve_task(spec, args.kernelbench_root)
                refs[spec] = pb.TaskRef(source=pb.TaskSource(source=t.source.encode(), name=t.name), sha256=t.sha256)
            else:
                refs[spec] = pb.TaskRef(name=spec)
        return refs[spec]

    options = score_options.option_changes(args)
    scoring_options = {**score_options.remote_identity(args), "baseline": args.baseline}
    endpoints = [e.strip() for e in args.server.split(",") if e.strip()]
    client = FarmClient(endpoints, token, tls)
    scorer = remote_scorer(client, options, task_ref, args.baseline,
                           result_timeout_s=args.timeout or RESULT_TIMEOUT_S)
    return BatchScorer(task_ref, scorer,
                       lambda item: Identity(task_ref(item.task).sha256 or None, item.sha256, scoring_options),
                       client.close)


# Where the built-in suite's variants live, as a path a user can type from a source checkout.
VARIANTS_DIR = "evalfarm/tasks/builtin/variants"


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
        variants = ", ".join(row["variants"]) or "-"  # type: ignore[arg-type]
        line = f"{row['id']:<8} {row['name']:<32} {variants}"
        lint = row.get("lint")
        if isinstance(lint, dict):
            if not lint["loaded"]:
                line += f"  LOAD FAILED: {str(lint['error']).splitlines()[0][:200]}"
            elif lint["degenerate"]:
                line += f"  DEGENERATE: {lint['degenerate']}"
            else:
                line += f"  ok ({lint['profile']}, reference {lint['ref_ms']:.3f} ms)"
        print(line)
    if any(row["variants"] for row in rows):
        print(f"variants: candidates shipped with a task, <fast|wrong>_<any|cpu|cuda>_<label> (fast: correct and "
              f"faster; wrong: subtly incorrect; where it runs), in {VARIANTS_DIR}/level<L>/<task>/<variant>.py; "
              f"e.g. evalfarm score --task L1/2 --candidate {VARIANTS_DIR}/level1/2_DiagMatmul/fast_any_row_scale.py")
    if args.lint:
        bad = [r for r in rows if isinstance(r.get("lint"), dict) and not r["lint"]["ok"]]  # type: ignore[index]
        print(f"{len(rows) - len(bad)}/{len(rows)} tasks load and depend on their inputs"
              + (" (no speedup is paid on a degenerate task: docs/tasks.md)" if bad else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from evalfarm import __version__

    parser = argparse.ArgumentParser(prog="evalfarm", description=__doc__.split("\n")[0], formatter_class=FORMATTER)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    parser.add_argument("--version", action="version", version=f"evalfarm {__version__}")
    # -v also after the subcommand (`evalfarm score -v ...`); SUPPRESS keeps the one given first.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log progress at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, formatter_class=FORMATTER, parents=[common])

    _add_score_args(command("score", "score a candidate (or a batch) against a task"))
    p_tasks = command("tasks", "list the tasks and their shipped variants (and lint them)")
    p_tasks.add_argument("--kernelbench-root", default=None, metavar="DIR",
                         help="list a KernelBench checkout instead of the built-in suite")
    p_tasks.add_argument("--json", action="store_true", help="print one JSON array")
    p_tasks.add_argument("--lint", action="store_true",
                         help="load every task and probe it: does its output depend on its inputs (degenerate tasks)?")
    p_tasks.add_argument("--device", default="cpu", help="device for --lint: cpu, cuda or cuda:N")
    p_tasks.add_argument("--size-profile", default="auto", metavar="PROFILE", help="size profile for --lint")
    p_serve = command("serve", "run a farm daemon")
    p_status = command("status", "show a daemon's capacity and health")
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
    from evalfarm import interrupt

    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    restore = None
    if args.command in ("score", "tasks") and threading_is_main():
        restore = interrupt.install()  # `serve` drains on SIGTERM / SIGINT itself
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at exit
        return code
    except KeyboardInterrupt as err:
        print(interrupt.summary_of(err), file=sys.stderr, flush=True)
        return interrupt.EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`evalfarm tasks --json | head`): not an error, and no traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (TaskFormatError, ConfigError, FileNotFoundError, ToolError) as err:
        print(f"evalfarm: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as err:
        print(f"evalfarm: error: {args.command} is not available: {err}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if restore is not None:
            restore()


def threading_is_main() -> bool:
    """Signal handlers can only be set from the main thread (main() may be called from another)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def _dispatch(args: argparse.Namespace) -> int:
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
    raise ToolError(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
