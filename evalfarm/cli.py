"""The ``evalfarm`` command: score locally or on a farm, list tasks, serve, show status.

    evalfarm score --task L1/1 --candidate my_kernel.py [--device cpu|cuda[:N]] [--json]
    evalfarm score --candidates DIR|FILE.jsonl --out results.jsonl [--server H:P[,H:P...]] [--baseline compile]
    evalfarm score ... [--profile [DIR]] [--save-failing-input DIR] [--require-other-sizes | --no-other-sizes]
    evalfarm tasks [--kernelbench-root DIR] [--lint [--device cpu|cuda] [--size-profile P]]
    evalfarm serve --port 50051 [--device cpu] ...
    evalfarm status --server HOST:PORT

Exit code 0 for any verdict (1 when a verdict named by --fail-on occurred); 2 when the tool
itself cannot run (bad arguments, missing file, unknown task, no GPU for --device cuda), with
the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from evalfarm.config import ConfigError, ScoreConfig
from evalfarm.tasks.format import TaskFormatError

EXIT_USAGE = 2
EXIT_FAIL_ON = 1
FORMATTER = argparse.ArgumentDefaultsHelpFormatter


class ToolError(Exception):
    """The command cannot run here (exit code 2); the message says why."""


def _add_score_args(p: argparse.ArgumentParser) -> None:
    from evalfarm.build.cache import DEFAULT_CACHE_DIR

    p.add_argument("--task", default=None, help="task file, built-in id (L1/1) or name (one candidate)")
    p.add_argument("--candidate", default=None, help="candidate file with class ModelNew (one candidate)")
    p.add_argument("--candidates", default=None,
                   help="batch: a JSONL file ({task, candidate, sample_id}) or a run directory "
                        "level*/problem_*/sample_*.py (docs/operations.md, batch scoring)")
    p.add_argument("--out", default=None, help="batch: results JSONL, appended to and resumed from")
    p.add_argument("--table-csv", default=None, help="batch: also write the summary table as CSV here")
    p.add_argument("--table-md", default=None, help="batch: also write the summary table as Markdown here")
    p.add_argument("--baseline", choices=["compile"], default=None,
                   help="also score torch.compile(Model) of each task and report speedups over it")
    p.add_argument("--other-sizes", action=argparse.BooleanOptionalAction, default=True,
                   help="after an OK verdict, re-check correctness at one other size profile of the task and "
                        "report it as evidence.other_sizes (docs/tasks.md, unseen sizes)")
    p.add_argument("--require-other-sizes", action="store_true",
                   help="a failure at the other size profile makes the verdict INCORRECT")
    p.add_argument("--profile", nargs="?", const="", default=None, metavar="DIR",
                   help="save a torch profiler trace of one candidate call (and an Nsight Compute report where "
                        "ncu is on PATH) in DIR (default: ./evalfarm-profile, or <out>_profile/ for a batch); "
                        "local scoring only")
    p.add_argument("--save-failing-input", default=None, metavar="DIR",
                   help="write the inputs and both outputs of the first failing correctness round to DIR "
                        "(torch.save files and failing_input.json); local scoring only")
    p.add_argument("--fail-on", default=None, metavar="VERDICTS",
                   help="comma list of verdicts (e.g. INCORRECT,HACK_DETECTED) that make the exit code 1")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object (one candidate)")
    p.add_argument("--inputs", type=int, default=None, help="correctness inputs (None: 1000)")
    p.add_argument("--budget", type=float, default=None, help="timing budget in seconds (None: 10)")
    p.add_argument("--tolerance", choices=["strict", "kernelbench"], default=None, help="None: strict")
    p.add_argument("--guard-policy", choices=["honest", "paper", "strict", "permissive"], default=None,
                   help="which static findings decide alone (None: honest; paper = KernelBench's rules)")
    p.add_argument("--charge-exchange", choices=["auto", "on", "off"], nargs="?", const="on", default="auto",
                   help="add to every candidate call the time the judge's own clock saw beyond the calls the "
                        "candidate's process reported, over the reference's (always reported as "
                        "timing.exchange_excess_us); auto (the default): on a GPU only; on: also on a CPU, for "
                        "a quiet host (docs/security.md)")
    p.add_argument("--gpu-lease-timeout", type=float, default=None, metavar="SECONDS",
                   help="how long to wait while another evaluation on this host holds the GPU (default 600; "
                        "then INFRA_ERROR); not charged to the candidate")
    p.add_argument("--correctness-block", action=argparse.BooleanOptionalAction, default=None,
                   help="run the correctness rounds after the warm-up a batch per worker exchange, their inputs "
                        "all written before the batch and their times never counted (None: on); "
                        "--no-correctness-block: one exchange per call (docs/security.md)")
    p.add_argument("--warm-call", choices=["auto", "on", "off"], nargs="?", const="on", default="auto",
                   help="before each short timed call (reference under 1 ms), call the model once, untimed, on "
                        "inputs the worker has already seen, in both workers; auto (the default): on a CPU only "
                        "(docs/security.md, \"Warm calls\")")
    p.add_argument("--size-profile", default=None, help="task size profile (None: auto)")
    p.add_argument("--kernelbench-root", default=None, help="resolve --task in a KernelBench checkout")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR),
                   help="cache root shared with `evalfarm serve` (builds in <dir>/build; $EVALFARM_CACHE_DIR)")
    p.add_argument("--server", default=None,
                   help="score on farm daemons HOST:PORT (a comma list for a batch) instead of locally")
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
    changes["check_other_sizes"] = bool(args.other_sizes)
    changes["require_other_sizes"] = bool(args.require_other_sizes)
    if args.charge_exchange != "auto":
        changes["charge_exchange"] = args.charge_exchange == "on"
    if args.gpu_lease_timeout is not None:
        changes["gpu_lease_timeout_s"] = args.gpu_lease_timeout
    if args.correctness_block is not None:
        changes["correctness_block"] = args.correctness_block
    if args.warm_call != "auto":
        changes["warm_call"] = args.warm_call == "on"
    return ScoreConfig(**changes)  # type: ignore[arg-type]


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
        return run_batch_score(args, fail_on)
    if not (args.task and args.candidate):
        raise ToolError("give --task and --candidate (one candidate), or --candidates and --out (a batch)")
    if args.server:
        from evalfarm.client.cli import run_remote_score

        return run_remote_score(args)  # exit code 0 for any verdict, 2 when it cannot run
    from evalfarm import scoring
    from evalfarm.build import BuildPool
    from evalfarm.tasks.format import Candidate, read_source
    from evalfarm.tasks.suite import resolve_task

    config = _config_from(args)
    check_device(config.device)
    task = resolve_task(args.task, args.kernelbench_root)
    # A broken candidate is a verdict (COMPILE_ERROR, LOAD_ERROR), so only reading it can fail here.
    candidate = Candidate(source=read_source(args.candidate, "candidate"), name=Path(args.candidate).stem,
                          path=str(args.candidate))
    task.resolve_profile(config.size_profile, "cpu" if config.device == "cpu" else "cuda")
    pool = BuildPool(max_workers=1, cache_dir=Path(args.cache_dir) / "build")
    if not args.json:
        print(f"scoring {candidate.path} against {task.name} on {config.device} "
              f"(a few seconds to minutes: build, {config.num_correctness_inputs} correctness inputs, "
              f"up to {config.timing_budget_s:g} s of timing) ...", file=sys.stderr)
    from evalfarm.judge.diagnose import Diagnostics

    diagnostics = Diagnostics(str(profile_dir) if profile_dir else None, str(failing_dir) if failing_dir else None)
    result = scoring.score(task, candidate, config, build_pool=pool, diagnostics=diagnostics)
    if args.json:
        print(result.to_json())
    else:
        print(scoring.describe(result))
    return EXIT_FAIL_ON if result.verdict.value in fail_on else 0


def run_batch_score(args: argparse.Namespace, fail_on: set[str]) -> int:
    """``score --candidates``: every sample scored once into --out, then the summary table."""
    from evalfarm import batch

    if not args.out:
        raise ToolError("--candidates needs --out FILE.jsonl (results are appended there and resumed from)")
    items = batch.read_candidates(args.candidates)
    if args.server:
        score_all, close = _remote_batch_scorer(args)
    else:
        from evalfarm.batch_score import local_scorer
        from evalfarm.build import BuildPool
        from evalfarm.tasks.suite import resolve_task

        config = _config_from(args)
        check_device(config.device)
        # Builds run ahead, in parallel (half the cores: nvcc is itself multi-threaded at times).
        pool = BuildPool(max_workers=max(1, (os.cpu_count() or 2) // 2), cache_dir=Path(args.cache_dir) / "build")
        score_all = local_scorer(config, lambda spec: resolve_task(spec, args.kernelbench_root), args.baseline, pool,
                                 _batch_diagnostics(*_diagnostics_root(args)))
        close = None
    try:
        rows = batch.run_batch(items, args.out, score_all, progress=not args.json)
    finally:
        if close is not None:
            close()
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


def _remote_batch_scorer(args: argparse.Namespace) -> tuple[object, object]:
    from evalfarm.batch_score import remote_scorer
    from evalfarm.client import FarmClient
    from evalfarm.client.cli import ToolError as RemoteToolError
    from evalfarm.client.cli import _tls_from, _token_from
    from evalfarm.tasks.suite import resolve_task
    from evalfarm.v1 import evalfarm_pb2 as pb

    try:
        token, tls = _token_from(args), _tls_from(args)
    except RemoteToolError as err:
        raise ToolError(str(err)) from None
    endpoints = [e.strip() for e in args.server.split(",") if e.strip()]
    client = FarmClient(endpoints, token, tls)
    refs: dict[str, object] = {}

    def task_ref(spec: str) -> object:
        # A task the client can read (a file, or a KernelBench id with --kernelbench-root) is sent
        # by content; a bare name is resolved by the daemon.
        if spec not in refs:
            p = Path(spec)
            if p.suffix == ".py" or p.exists() or args.kernelbench_root:
                t = resolve_task(spec, args.kernelbench_root)
                refs[spec] = pb.TaskRef(source=pb.TaskSource(source=t.source.encode(), name=t.name), sha256=t.sha256)
            else:
                refs[spec] = pb.TaskRef(name=spec)
        return refs[spec]

    options = {k: v for k, v in _config_from(args).to_dict().items()
               if k != "device" and getattr(args, _OPTION_FLAGS.get(k, "-"), None) is not None}
    return remote_scorer(client, options, task_ref, args.baseline), client.close


_OPTION_FLAGS = {"num_correctness_inputs": "inputs", "timing_budget_s": "budget", "tolerance": "tolerance",
                 "size_profile": "size_profile", "guard_policy": "guard_policy",
                 "check_other_sizes": "other_sizes", "require_other_sizes": "require_other_sizes",
                 "charge_exchange": "charge_exchange", "gpu_lease_timeout_s": "gpu_lease_timeout",
                 "correctness_block": "correctness_block", "warm_call": "warm_call"}


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
    from evalfarm import __version__

    parser = argparse.ArgumentParser(prog="evalfarm", description=__doc__.split("\n")[0], formatter_class=FORMATTER)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    parser.add_argument("--version", action="version", version=f"evalfarm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_score_args(sub.add_parser("score", help="score a candidate (or a batch) against a task",
                                   formatter_class=FORMATTER))
    p_tasks = sub.add_parser("tasks", help="list tasks (and lint them)", formatter_class=FORMATTER)
    p_tasks.add_argument("--kernelbench-root", default=None, help="list a KernelBench checkout instead of the built-in suite")
    p_tasks.add_argument("--json", action="store_true", help="print one JSON array")
    p_tasks.add_argument("--lint", action="store_true",
                         help="load every task and probe it: does its output depend on its inputs (degenerate tasks)?")
    p_tasks.add_argument("--device", default="cpu", help="device for --lint: cpu, cuda or cuda:N")
    p_tasks.add_argument("--size-profile", default="auto", help="size profile for --lint")
    p_serve = sub.add_parser("serve", help="run a farm daemon", formatter_class=FORMATTER)
    p_status = sub.add_parser("status", help="show a daemon's capacity and health", formatter_class=FORMATTER)
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
        code = _dispatch(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at exit
        return code
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
