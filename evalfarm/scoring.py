"""Scoring one candidate: build, then judge. Usable without any server.

    result = evalfarm.score("L1/1", "candidate.py", ScoreConfig(device="cpu"))

The calling process never initialises CUDA and never runs candidate code: the build
runs in a sandboxed child of the build pool, the judge in a child of its own, and the
candidate in a child of the judge. It does not analyse the source itself either: the static
guards run in a bounded child process (``evalfarm.guards.bounded``), so a pathological source
costs a daemon neither its event loop nor its memory. ``start`` returns a handle that can be waited on with
a timeout or cancelled, which kills every process of the evaluation. Judge processes come from
``evalfarm.judge.standby``: started on demand, or ahead of need by a ``WarmJudges`` (a daemon's),
so an evaluation does not wait for interpreters, torch imports and CUDA contexts.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from evalfarm import other_sizes, reverify
from evalfarm.build import BuildPool, BuildReport
from evalfarm.build.hook import uses_inline_extensions
from evalfarm.config import ScoreConfig
from evalfarm.devices import build_arch
from evalfarm.eval_budget import RunBudget, WallBudget, overrun_detail, run_budget
from evalfarm.guards import CandidateSyntaxError, GuardPolicy, blocking
from evalfarm.guards.bounded import StaticAnalysisUnavailable, check_candidate_source
from evalfarm.judge import bytecode, framing, interpreter
from evalfarm.judge.diagnose import Diagnostics
from evalfarm.judge.standby import JudgeProcess, WarmJudges
from evalfarm.judge.task_facts import TaskFacts, task_key
from evalfarm.judge.task_window import request_key
from evalfarm.result import Evidence, ScoreResult
from evalfarm.sandbox import isolation
from evalfarm.tasks.format import Candidate, Task, load_candidate_file, parse_candidate, parse_task
from evalfarm.tasks.suite import resolve_task
from evalfarm.verdict import Verdict

log = logging.getLogger(__name__)

_default_pool: BuildPool | None = None
_default_pool_lock = threading.Lock()


def default_build_pool() -> BuildPool:
    global _default_pool
    with _default_pool_lock:
        if _default_pool is None:
            _default_pool = BuildPool(max_workers=max(1, (os.cpu_count() or 2) // 2))
        return _default_pool


def as_task(task: Task | str | Path) -> Task:
    if isinstance(task, Task):
        return task
    text = str(task)
    if "\n" in text and "class Model" in text:
        return parse_task(text, "inline_task")
    return resolve_task(text)


def as_candidate(candidate: Candidate | str | Path) -> Candidate:
    if isinstance(candidate, Candidate):
        return candidate
    text = str(candidate)
    if "\n" in text or "class ModelNew" in text:
        return parse_candidate(text)
    return load_candidate_file(text)


# The longest an evaluation's timed rounds wait for a standby judge of its device to start up
# (below the judge's own BEFORE_ROUNDS_TIMEOUT_S, after which it would go on by itself).
STANDBY_HOLD_S = 20.0
# Beyond gpu_lease_timeout_s, what a judge waiting for its GPU lease may take to say it gave up.
LEASE_SLACK_S = 30.0


# progress(phase, facts): told as each phase of an evaluation starts, from the evaluation's thread;
# for a person watching (`evalfarm score`), never used for the score. Phases, in order: "static",
# "build" (only when the candidate compiles extensions), "gpu_wait" (facts: holders), "load",
# "correctness", "timing" (the judge's; facts: run = "first", "reverify" or "other_sizes"),
# "reverify" (facts: speedup) and "other_sizes" (facts: profile).
Progress = Callable[[str, dict[str, object]], None]

# How often a wait for a build looks whether the evaluation was cancelled.
CANCEL_POLL_S = 0.2


class Evaluation:
    """A running scoring: wait for it with ``result()``, stop it with ``cancel()``."""

    def __init__(self, task: Task, candidate: Candidate, config: ScoreConfig, pool: BuildPool,
                 diagnostics: Diagnostics | None = None, judges: WarmJudges | None = None,
                 progress: Progress | None = None, deadline_s: float | None = None) -> None:
        self.task, self.candidate, self.config, self.pool = task, candidate, config, pool
        # The whole evaluation's deadline (evalfarm.eval_budget), counted from now.
        self.deadline_s = deadline_s if deadline_s and deadline_s > 0 else None
        self._deadline_at = None if self.deadline_s is None else time.monotonic() + self.deadline_s
        self.judges = judges
        self.progress = progress
        self._judge_run_kind = "first"
        # Task facts from earlier judges (the daemon's, shared by its evaluations; else this
        # evaluation's own, for its re-verification and other-size judges).
        self.facts = judges.task_facts if judges is not None else TaskFacts()
        self.diagnostics = diagnostics or Diagnostics()
        self._done = threading.Event()
        self._result: ScoreResult | None = None
        self._cancelled = False
        self._lock = threading.Lock()
        # Every judge process of the evaluation (first, re-verification, other sizes), with its
        # workers and its run directory: all killed and removed when the evaluation ends however it
        # ends, or by a later sweep if this process dies.
        self._judges: list[JudgeProcess] = []
        self._expected_extensions: dict[str, dict[str, str]] = {}  # key -> file hashes the pool installed
        self._failed_extensions: dict[str, dict[str, str]] = {}  # key -> the pool's failure, raised in the worker
        self._thread = threading.Thread(target=self._run, name="evaluation", daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None = None) -> ScoreResult:
        if not self._done.wait(timeout):
            raise TimeoutError(f"scoring did not finish within {timeout} s")
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            self._kill()

    def _tell(self, phase: str, **facts: object) -> None:
        if self.progress is not None:
            try:
                self.progress(phase, facts)
            except Exception:  # noqa: BLE001 - a broken progress display must not cost the result
                log.exception("progress callback failed")

    def _kill(self) -> None:
        for judge in self._judges:
            judge.kill()

    def _finish(self, result: ScoreResult) -> None:
        result.task = result.task or self.task.name
        result.candidate_sha256 = self.candidate.sha256
        if not result.evidence.sandbox:  # the host's check (a daemon's says the same, from its start)
            result.evidence.sandbox = isolation.assess(self.config.device).summary()
        if self._cancelled:
            result = ScoreResult.failure(Verdict.INFRA_ERROR, "cancelled", evidence=result.evidence,
                                         task=result.task, candidate_sha256=self.candidate.sha256)
        self._result = result
        self._done.set()

    def _run(self) -> None:
        try:
            result = self._score()
        except Exception as err:  # noqa: BLE001 - never leave a caller without a result
            log.exception("scoring failed")
            result = ScoreResult.failure(Verdict.INFRA_ERROR, f"scoring failed: {type(err).__name__}: {err}")
        finally:
            # Before the result is out: when a caller sees it, no process or file of it is left.
            with self._lock:
                for judge in self._judges:
                    judge.close()
        self._finish(result)

    def _score(self) -> ScoreResult:
        cfg = self.config
        phases: dict[str, float] = {}
        t0 = time.monotonic()
        policy = GuardPolicy.from_name(cfg.guard_policy)
        self._tell("static")
        try:
            findings = check_candidate_source(self.candidate.source, policy, reference_source=self.task.source)
        except CandidateSyntaxError as err:
            return ScoreResult.failure(Verdict.COMPILE_ERROR, str(err))
        except StaticAnalysisUnavailable as err:
            return ScoreResult.failure(Verdict.INFRA_ERROR, str(err))
        phases["static_guards"] = time.monotonic() - t0
        # Static analysis testifies: every finding goes into the evidence; only a blocking one
        # (unsafe to run, or invisible at run time under the policy) decides the verdict alone.
        static = [f.to_dict() for f in findings]
        blocks = blocking(findings)
        if blocks:
            notes = [f"{f.guard}: {f.reason}" for f in blocks]
            return ScoreResult.failure(
                Verdict.HACK_DETECTED, f"guard {blocks[0].guard}: {blocks[0].reason}"
                + (f" (+{len(blocks) - 1} more)" if len(blocks) > 1 else ""),
                evidence=Evidence(guards=notes, phases_s=phases, static_findings=static))
        if not self.candidate.source.strip():
            return ScoreResult.failure(Verdict.LOAD_ERROR, "the candidate is empty: it defines no class ModelNew")
        if "ModelNew" not in self.candidate.source:
            return ScoreResult.failure(Verdict.LOAD_ERROR, "the candidate defines no class ModelNew")
        try:
            arch = build_arch(cfg.device)
        except RuntimeError as err:
            return ScoreResult.failure(Verdict.INFRA_ERROR, str(err))
        if uses_inline_extensions(self.candidate.source):
            self._tell("build")
        build = self.pool.submit(self.candidate.source, arch, cfg.build_timeout_s)
        while True:  # a cancelled evaluation does not wait for its build (the pool's owner ends it)
            if self._cancelled:
                return ScoreResult.failure(Verdict.INFRA_ERROR, "cancelled")
            if self._deadline_left() == 0.0:
                return ScoreResult.failure(Verdict.TIMEOUT, overrun_detail(
                    cfg, RunBudget(0.0, by_deadline=True), self.deadline_s, where="the build"))
            try:
                report: BuildReport = build.result(timeout=CANCEL_POLL_S)
                break
            except concurrent.futures.TimeoutError:
                continue
        phases["build"] = time.monotonic() - t0
        build_ev = {**report.to_dict(), "arch": arch}
        # A call that failed to compile is no verdict by itself (it is raised in the worker, where the
        # candidate may catch it: failed_extensions). A verdict here: a failure the discover step saw
        # the module let out, a refused source (never the candidate's to catch), a timed-out build.
        if report.status in ("compile_error", "timeout"):
            detail = report.log if report.status == "compile_error" else report.log or "build timed out"
            verdict = Verdict.COMPILE_ERROR
            return ScoreResult.failure(verdict, detail, evidence=Evidence(build=build_ev, phases_s=phases))
        if report.status == "error":
            build_ev["note"] = "build runner failed; the worker builds on a cache miss"
        self._expected_extensions = report.expected_files()
        self._failed_extensions = report.failed_builds()
        if self._cancelled:
            return ScoreResult.failure(Verdict.INFRA_ERROR, "cancelled")
        first = self._judge_run(arch, extra={"diagnostics": self.diagnostics.to_dict()})
        result = self._reverify(first, arch)
        result.evidence.diagnostics = first.evidence.diagnostics  # the first judge wrote them
        result = self._other_sizes(result, arch)
        result.evidence.build = {**build_ev, **result.evidence.build}
        result.evidence.static_findings = static + result.evidence.static_findings
        result.evidence.phases_s = {**phases, **result.evidence.phases_s, "total": time.monotonic() - t0}
        return result

    def _reverify(self, first: ScoreResult, arch: str) -> ScoreResult:
        """Measure an outlier score again with fresh workers and a new secret, in the task window's
        judge where one is open (rule: evalfarm.reverify)."""
        if self._cancelled or not reverify.needs_reverification(first, above=self.config.reverify_above):
            return first
        self._tell("reverify", speedup=first.speedup)
        self._judge_run_kind = "reverify"
        t0 = time.monotonic()
        second = self._judge_run(arch, reverify.second_config(self.config))
        if self._cancelled:
            return second
        return reverify.merge(first, second, where="fresh process, same device",
                              info={"seconds": round(time.monotonic() - t0, 4)})

    def _other_sizes(self, result: ScoreResult, arch: str) -> ScoreResult:
        """After an OK verdict, a correctness-only evaluation at one other size profile (evalfarm.other_sizes)."""
        cfg = self.config
        if not cfg.other_sizes_wanted or not result.ok or self._cancelled:
            return result
        evaluated = result.evidence.size_profile
        task = other_sizes.with_derived_profile(self.task)
        profile = other_sizes.other_profile(task, evaluated)
        if profile is None:
            return other_sizes.apply(result, other_sizes.not_applicable(self.task, evaluated), cfg.require_other_sizes)
        t0 = time.monotonic()
        self._tell("other_sizes", profile=profile)
        self._judge_run_kind = "other_sizes"
        extra: dict[str, object] = {"correctness_only": True}
        if self.diagnostics.failing_input_dir:  # a failure there is saved too, in a folder of its own
            extra["diagnostics"] = Diagnostics(failing_input_dir=os.path.join(
                self.diagnostics.failing_input_dir, f"other_sizes_{profile}")).to_dict()
        second = self._judge_run(arch, other_sizes.check_config(cfg, profile), extra, task=task)
        if self._cancelled:
            return second
        if "failing_input" in second.evidence.diagnostics:
            result.evidence.diagnostics["other_sizes_failing_input"] = second.evidence.diagnostics["failing_input"]
        check = other_sizes.from_result(profile, second, time.monotonic() - t0)
        return other_sizes.apply(result, check, cfg.require_other_sizes)

    def _deadline_left(self) -> float | None:
        """Seconds left before the evaluation's deadline (None: it has none)."""
        return None if self._deadline_at is None else max(0.0, self._deadline_at - time.monotonic())

    def _judge_run(self, arch: str, config: ScoreConfig | None = None,
                   extra: dict[str, object] | None = None, task: Task | None = None) -> ScoreResult:
        """One judge process over ``task`` (default: this evaluation's task; other_sizes passes a
        copy with a derived size profile)."""
        cfg = config or self.config
        task = task or self.task
        allowed = run_budget(cfg, self._deadline_left())
        if allowed.seconds == 0.0:
            return ScoreResult.failure(Verdict.TIMEOUT, overrun_detail(cfg, allowed, self.deadline_s))
        facts_key = task_key(task.source, task.size_profiles, cfg.size_profile, cfg.device)
        request = {
            "config": cfg.to_dict(), "task_name": task.name, "task_source": task.source,
            "size_profiles": task.size_profiles, "candidate_source": self.candidate.source,
            "cache_dir": str(self.pool.cache_dir), "arch": arch,
            "expected_extensions": self._expected_extensions, "failed_extensions": self._failed_extensions,
            "task_facts": self.facts.get(facts_key),
            **(extra or {}),
        }
        window = self.judges.window_request() if self.judges is not None else None
        window_key = ""
        if window is not None:  # a judge may keep this task's set-up for the next (evalfarm.judge.task_window)
            request["window"] = window
            window_key = request_key(request)
        try:
            bytecode.setting()  # a bad switch stops here, named, rather than in the judge's start
            interpreter.require()  # so does a judge's Python without torch
        except (bytecode.SettingError, interpreter.JudgeInterpreterError) as err:
            return ScoreResult.failure(Verdict.INFRA_ERROR, str(err))
        with self._lock:
            if self._cancelled:
                return ScoreResult.failure(Verdict.INFRA_ERROR, "cancelled")
            judge = (self.judges.take(cfg.device, window_key) if self.judges is not None
                     else JudgeProcess(cfg.device))
            self._judges.append(judge)
        age_s = judge.age_s
        conn = judge.conn
        try:
            framing.send_json(conn, request)
        except OSError:
            code = judge.proc.poll()
            return ScoreResult.failure(Verdict.INFRA_ERROR, f"the judge process ended before its request (code {code})")
        budget = WallBudget(allowed.seconds)
        while True:
            try:
                msg = framing.recv_json(conn, budget.left())
            except TimeoutError:
                # The judge bounds every step it waits on; what is left to run past the run's
                # wall budget (or the evaluation's deadline) is the candidate's own slowness:
                # charged to it (evalfarm.eval_budget).
                return ScoreResult.failure(Verdict.TIMEOUT, overrun_detail(cfg, allowed, self.deadline_s))
            except framing.PeerClosed:
                code = judge.proc.poll()
                return ScoreResult.failure(Verdict.INFRA_ERROR, f"the judge process ended (code {code})")
            with self._lock:
                if judge.note_message(msg):
                    if self._cancelled:
                        self._kill()
                    continue
            if msg.get("op") == "phase":
                self._tell(str(msg.get("phase")), run=self._judge_run_kind)
                continue
            if msg.get("op") == "gpu_lease_wait":
                # Another evaluation holds the GPU: its time is not this candidate's. The judge
                # bounds the wait itself (gpu_lease_timeout_s); the clock stops until it ends.
                self._tell("gpu_wait", holders=str(msg.get("holders", "")))
                budget.pause(cfg.gpu_lease_timeout_s + LEASE_SLACK_S)
                continue
            if msg.get("op") == "gpu_lease":
                budget.resume()
                continue
            if msg.get("op") == "before_rounds":
                # Times count only while no standby of this device is starting up: "hold" tells
                # the judge to check inputs meanwhile and set their times aside, "go" ends that.
                try:
                    if (self.judges is not None and self.judges.hold_rounds
                            and not self.judges.wait_ready(cfg.device, 0)):
                        framing.send_json(conn, {"op": "hold"})
                        self.judges.wait_ready(cfg.device, STANDBY_HOLD_S, lambda: self._cancelled)
                    framing.send_json(conn, {"op": "go"})
                except OSError:
                    pass  # the judge is gone: the next receive says so
                continue
            if msg.get("op") == "result":
                result = ScoreResult.from_dict(msg["result"])
                if msg.get("window_open") is True and self.judges is not None and window_key:
                    with self._lock:  # the judge is the pool's again, no longer this evaluation's
                        self._judges.remove(judge)
                        cancelled = self._cancelled
                    if cancelled:
                        judge.close()
                    else:
                        live = msg.get("live_pgids")
                        self.judges.park(judge, window_key, [p for p in live if isinstance(p, int)]
                                         if isinstance(live, list) else None)
                self.facts.note(facts_key, result.evidence.memory)
                # How long the judge had been up when its request came: its start-up, not waited for.
                result.evidence.phases_s["judge_started_ahead"] = round(age_s, 3)
                result.evidence.phases_s.update(judge.startup)
                return result


def build_ahead(task: Task, candidate: Candidate, config: ScoreConfig, pool: BuildPool) -> bool:
    """Start the candidate's extension build now, if its evaluation would build it at all (no
    blocking static finding, a ModelNew, an arch for the device). The evaluation's own build later
    joins this one (the pool deduplicates by content) or finds it in the cache. A daemon calls
    this when a candidate is admitted, so builds run while candidates wait for a slot. Returns
    whether a build was started or joined."""
    try:
        findings = check_candidate_source(candidate.source, GuardPolicy.from_name(config.guard_policy),
                                          reference_source=task.source)
    except (CandidateSyntaxError, StaticAnalysisUnavailable):
        return False
    if blocking(findings) or "ModelNew" not in candidate.source:
        return False
    try:
        arch = build_arch(config.device)
    except RuntimeError:
        return False
    pool.submit(candidate.source, arch, config.build_timeout_s)
    return True


def start(task: Task, candidate: Candidate, config: ScoreConfig, build_pool: BuildPool | None = None,
          diagnostics: Diagnostics | None = None, judges: WarmJudges | None = None,
          progress: Progress | None = None, deadline_s: float | None = None) -> Evaluation:
    """Begin scoring in the background (with judges from ``judges`` when given, else started now).
    ``deadline_s`` bounds the whole evaluation from now; running past it is TIMEOUT (evalfarm.eval_budget)."""
    return Evaluation(task, candidate, config, build_pool or default_build_pool(), diagnostics, judges, progress,
                      deadline_s)


# After a cancel, how long waiting() waits for the evaluation's processes to be killed and removed.
CANCEL_WAIT_S = 60.0


def waiting(evaluation: Evaluation) -> ScoreResult:
    """The evaluation's result; when the wait is interrupted (Ctrl-C, any exception), the
    evaluation is cancelled and its processes ended before the exception goes on."""
    try:
        return evaluation.result()
    except BaseException:
        evaluation.cancel()
        try:
            evaluation.result(CANCEL_WAIT_S)
        except TimeoutError:
            log.warning("a cancelled evaluation did not end within %.0f s", CANCEL_WAIT_S)
        raise


def score(task: Task | str | Path, candidate: Candidate | str | Path, config: ScoreConfig | None = None,
          build_pool: BuildPool | None = None, diagnostics: Diagnostics | None = None,
          judges: WarmJudges | None = None, progress: Progress | None = None,
          deadline_s: float | None = None) -> ScoreResult:
    """Score a candidate against a task: a file path, built-in id/name, or a Task/Candidate.
    ``diagnostics`` asks for a profiler trace and/or the first failing round's tensors (local only);
    ``judges`` supplies judge processes started ahead (many candidates in a row); ``progress`` is
    told of each phase as it starts; ``deadline_s`` bounds the whole evaluation (running past it
    is TIMEOUT, as on the farm: evalfarm.eval_budget). Interrupted (KeyboardInterrupt), it ends
    the evaluation's processes before the exception goes on."""
    return waiting(start(as_task(task), as_candidate(candidate), config or ScoreConfig(), build_pool, diagnostics,
                         judges, progress, deadline_s))



