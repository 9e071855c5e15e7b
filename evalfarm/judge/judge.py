"""The trusted judge: owns the inputs, the reference outputs and the verdict.

One evaluation, in the order of docs/security.md (the process around it: evalfarm.judge.serve).
The judge has two fresh workers (``evalfarm.judge.worker``): a *reference* worker that runs the
task's Model and nothing else, and a *candidate* worker that runs ModelNew. The reference is computed
and timed in a process where the candidate's code never runs, so nothing the candidate sets in its
own process (global flags, hooks, patched torch functions, thread counts) can change it.

``Judge.run``: the set-up (evalfarm.judge.setup: the task and its reference measured in the judge's
own process, the arenas sized, both workers loaded), then the rounds (``Judge._measure``): each
batch planned (evalfarm.judge.rounds), run as a correctness block (evalfarm.judge.correctness), a
pair of timed blocks (evalfarm.judge.timed_blocks) or one call per exchange
(evalfarm.judge.lone_calls; every exchange: evalfarm.judge.exchange), each call bounded
(evalfarm.judge.bounds); then, with both workers idle, the audited rounds checked against the
reference's outputs (evalfarm.judge.audits) and the counted rounds' times kept
(evalfarm.judge.samples) until the timing statistics say stop (evalfarm.timing.decide). The score
is the samples' speedups with what the candidate's report left out charged to every call
(evalfarm.judge.charges); an OK result passes the clock and physical-floor checks
(evalfarm.judge.floor) first. Whose fault a failure is: evalfarm.judge.blame; what the result says
beside its verdict: evalfarm.judge.evidence.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import secrets
import time
from typing import TYPE_CHECKING, Any

import torch

from evalfarm import sandbox
from evalfarm.compare import Comparison, flatten_output
from evalfarm.config import ScoreConfig
from evalfarm.devices import dram_peak, nvml_clock_reader
from evalfarm.infra_cause import InfraCause
from evalfarm.judge import (
    diagnose,
    evidence,
    extension_facts,
    floor,
    framing,
    gpu_lease,
    precision,
    roofline,
)
from evalfarm.judge.arena import Arena
from evalfarm.judge.audit_overlap import AuditLook
from evalfarm.judge.audits import AuditSchedule, RoundAudit
from evalfarm.judge.blame import Verdicted
from evalfarm.judge.bounds import Bounds
from evalfarm.judge.charges import Charges, clock_behind_events
from evalfarm.judge.correctness import (
    BlockLog,
    correctness_block_rounds,
    min_block_rounds,
    run_block,
)
from evalfarm.judge.draw_ahead import DrawAhead
from evalfarm.judge.exchange import Link, Switches, raise_worker_error
from evalfarm.judge.lone_calls import run_lone_round, warm_call_wanted
from evalfarm.judge.placement import INPUT_SLACK_BYTES
from evalfarm.judge.quiet import QuietProbe
from evalfarm.judge.reference_memo import REFERENCE_MEMO_ENV, MemoRounds, ReferenceMemo
from evalfarm.judge.roles import CANDIDATE, PROFILE_DIR, REFERENCE
from evalfarm.judge.round_trace import RoundTrace
from evalfarm.judge.rounds import RoundPlan, RoundPlanner
from evalfarm.judge.samples import RoundCounts, Samples
from evalfarm.judge.setup import (
    Candidate,
    Reference,
    SetupClock,
    TaskSetup,
    allocate_arenas,
    await_started,
    candidate_load,
    cuda_identity,
    device_facts,
    inputs_not_repeatable,
    reference_load,
    refresh_precision,
    set_up_precision,
    set_up_reference,
    take_gpu_lease,
    worker_cpu_cores,
)
from evalfarm.judge.state import set_clean_state
from evalfarm.judge.task_window import WindowState
from evalfarm.judge.timed_blocks import WARMUP_CALLS, TimedPair
from evalfarm.judge.worker_processes import StartedWorkers, _visible, start_workers
from evalfarm.result import Evidence, ScoreResult, TimingEvidence
from evalfarm.sandbox import bubblewrap, lifetime
from evalfarm.tasks.format import Task
from evalfarm.timing import bucket_stats, conservative_round, decide
from evalfarm.verdict import Verdict

if TYPE_CHECKING:
    from evalfarm.judge.serve import RoundsHold

MAX_REMEASURES = 2
# The input index of the profiled call (--profile): never one of the rounds' (0, 1, ...) or the
# judge's own set-up calls (-1, -2, -3), so it is fresh to the candidate.
PROFILE_INPUT_INDEX = -4
# Likewise for the call profiled for the share of GPU time in the candidate's own kernels.
KERNELS_INPUT_INDEX = -5
PROFILE_TIMEOUT_S = 120.0


class Judge:
    def __init__(self, request: dict[str, Any], report_pgid: Any, started: StartedWorkers | None = None,
                 hold: RoundsHold | None = None, notify: Any = None, window: WindowState | None = None,
                 shared: TaskSetup | None = None, spare: Any = None) -> None:
        self.config = ScoreConfig.from_dict(request["config"])
        self.task = Task(name=request["task_name"], source=request["task_source"],
                         size_profiles=request.get("size_profiles") or {})
        self.candidate = Candidate(source=request["candidate_source"], cache_dir=request["cache_dir"],
                                   arch=request["arch"],
                                   expected_extensions=request.get("expected_extensions") or {},
                                   failed_extensions=request.get("failed_extensions") or {})
        # What an earlier judge of this task measured (evalfarm.judge.task_facts); never seed- or
        # candidate-dependent, and checked before use.
        facts = request.get("task_facts")
        self.task_facts: dict[str, Any] = facts if isinstance(facts, dict) else {}
        self.report_pgid = report_pgid
        self.device = torch.device("cuda:0" if self.config.device == "cuda" else self.config.device)
        self.evidence = Evidence(device=str(self.device), versions=evidence.versions())
        self.phases: dict[str, float] = {}
        # Where the rounds' time goes (correctness and timing together), so a slow evaluation
        # shows whether drawing inputs, the worker exchange, the timed calls or the audits cost it:
        # rounds_inputs (draws, arena slots, poisoning), rounds_exchange (prepare, inputs written,
        # go, result: the calls included), rounds_calls (the workers' timed calls alone),
        # rounds_audit (output comparison and input checks). Beside them, in helper threads while
        # the workers ran correctness blocks: rounds_inputs_ahead (evalfarm.judge.draw_ahead) and
        # rounds_audit_overlapped (evalfarm.judge.audit_overlap). The exchange, split: rounds_prepare
        # (the worker's preparation, round trip included), of which rounds_poison (its poisoning
        # of free memory and L2 reset) and rounds_quiet (the reference's quiet-GPU wait);
        # rounds_write (the inputs written and synchronised); rounds_go (go to result: the call,
        # the worker's output checks and the reply; for a correctness block, all of its calls and
        # the worker's preparations between them; for a timed block, all of its calls with the judge's
        # input writes between them).
        self.round_phases: dict[str, float] = dict.fromkeys(
            ("rounds_inputs", "rounds_exchange", "rounds_calls", "rounds_audit", "rounds_prepare",
             "rounds_poison", "rounds_quiet", "rounds_write", "rounds_go"), 0.0)
        # Likewise the judge's set-up, split where a GPU might spend it: setup_device (device
        # selection, clean state), setup_task (the task module, its init inputs, the reference
        # model built), setup_reference (its first two calls and their facts), setup_lint (the
        # degenerate-output check), setup_roofline (one call's FLOPs counted), setup_precision (the
        # precision gate's float64 ground truths), setup_arenas (memory plan and input/output
        # arenas) and setup_device_facts (device properties, the DRAM peak from NVML).
        self.setup_phases: dict[str, float] = {}
        self._worst = Comparison(ok=True)  # the largest error of the rounds checked so far
        self.rng = random.Random(secrets.randbits(64))
        # A second, correctness-only evaluation (evalfarm.other_sizes): no timing, no speedup.
        self.correctness_only = bool(request.get("correctness_only"))
        self.diagnostics = diagnose.Diagnostics.from_dict(request.get("diagnostics"))
        self._tmp = ""
        self._cgroup_notes: list[str] = []
        self._started = started
        # RoundsHold (or None: nothing to wait for): times count only from the owner's go.
        self._hold = hold
        # notify(msg): tells the owner of a wait that is not the candidate's (the GPU lease), and
        # of each phase as it starts ({"op": "phase", "phase": "load" | "correctness" | "timing"}).
        self._notify = notify
        self._lease: gpu_lease.GpuLease | None = None
        self.block_rounds = correctness_block_rounds(self.config)
        self.block_log = BlockLog()  # how the blocks' calls went, per worker: evidence only
        self.trace = RoundTrace.from_env()  # an operator's diagnostic (evalfarm.judge.round_trace)
        self.switches = Switches.from_env(self.device.type)  # the operator's (evalfarm.judge.exchange)
        # Timed blocks (evalfarm.judge.timed_blocks): decided in the set-up, confirmed by both workers'
        # gates; then the judge's side of them.
        self.timed = False
        self.pair: TimedPair | None = None
        # The precision gate (evalfarm.judge.precision) and one call's counts for the roofline
        # (evalfarm.judge.roofline), both from the set-up (set_up_precision).
        self.precision_gate: precision.PrecisionGate | None = None
        self.roofline_counts: roofline.Counts | None = None
        # A task window (evalfarm.judge.task_window): this candidate's place in it, the set-up an
        # earlier candidate of the same key made (None: make it), and the set-up for the next.
        self.window = window
        self.shared = shared
        self.task_setup: TaskSetup | None = None
        # The window's kept reference outputs as this evaluation uses them (evalfarm.judge.reference_memo).
        self.memo_rounds: MemoRounds | None = None
        # spare(): pids of this process's children to keep at teardown (the window's next workers,
        # started during this evaluation: evalfarm.judge.serve.WindowHold); None: keep none.
        self._spare = spare

    def run(self) -> ScoreResult:
        started = self._started
        scratch = self.config.file_size_limit_bytes
        if started is not None and not started.fits(self.config.device, scratch):
            started.discard()  # started for another device or sandbox: not usable for this request
            started = None
        if started is None:
            try:
                started = start_workers(self.config.device, self.report_pgid, scratch)
            except bubblewrap.SandboxUnavailable as err:
                return self._result(Verdict.INFRA_ERROR, None, str(err))
        tmp = self._tmp = started.tmp
        self.candidate.staged = started.staged_cache
        workers = started.workers
        arenas: list[Arena] = []
        self.link = Link(*workers, self.device, self.switches, self.round_phases, self.trace)
        try:
            if self.device.type == "cuda":
                self._lease = take_gpu_lease(self.device, self.config.gpu_lease_timeout_s, self._notify)
                self.phases["gpu_lease_wait"] = round(self._lease.waited_s, 4)
            result = self._evaluate(arenas)
        except Verdicted as v:
            if self.diagnostics.profile_dir:
                self.evidence.diagnostics["profile"] = {"note": f"not profiled: the verdict is {v.verdict.value}"}
            result = self._result(v.verdict, None, v.detail, v.cause)
        finally:
            t_end = time.monotonic()
            self.link.resume_all()
            for w in workers:
                w.close()
            for a in arenas:
                a.close()
            # The judge is a child subreaper: orphans of the workers end up here (never below a spared child).
            spared = self._spare() if self._spare is not None else []
            lifetime.kill_descendants(spare_roots=spared)
            if self._lease is not None:  # after the workers are gone, so nothing of theirs runs on
                self._lease.release()
            sandbox.wipe(tmp)
        # Workers killed and reaped (their CUDA contexts destroyed), lease released, files wiped.
        result.evidence.phases_s["teardown"] = round(time.monotonic() - t_end, 4)
        if self.window is not None and result.evidence.task_window:
            # Whether the window's next candidate's workers started during this evaluation (they
            # share the device with its rounds while they do: serve.WINDOW_EARLY_START_ENV).
            result.evidence.task_window["next_workers_started_during"] = bool(spared)
        if self.trace is not None:
            self.trace.write()
        return result

    def _memo_off_reason(self, ref: Reference) -> str:
        """Why this evaluation keeps no reference outputs for its window ("" where it does)."""
        if self.window is None:
            return "no task window"
        if not self.switches.reference_memo_bytes:
            return f"turned off by the owner ({REFERENCE_MEMO_ENV}=0)"
        if not self.config.correctness_block:
            return "no correctness blocks (correctness_block is off)"
        if not all(w.bubblewrapped for w in (self.link.ref, self.link.cand)):
            return ("the workers are not in bubblewrap, where files may cross from one candidate to the "
                    "next: every candidate draws correctness inputs of its own")
        if ref.not_repeatable:
            return f"{ref.not_repeatable}: the reference runs every round for every candidate"
        return ""

    def _new_memo(self, ref: Reference) -> tuple[Reference, ReferenceMemo | None]:
        """The window's memo of reference outputs, where it may have one (evalfarm.judge.reference_memo),
        and the reference with what its inputs' repeat check found."""
        if self._memo_off_reason(ref):
            return ref, None
        why = inputs_not_repeatable(ref.source)
        if why:
            return dataclasses.replace(ref, not_repeatable=why), None
        return ref, ReferenceMemo(self.device, self.switches.reference_memo_bytes)

    def _phase(self, name: str) -> None:
        """Tell the owner a phase starts (progress for a person watching; never used for the score)."""
        if self._notify is not None:
            self._notify({"op": "phase", "phase": name})

    def _evaluate(self, arenas: list[Arena]) -> ScoreResult:
        cfg = self.config
        t0 = time.monotonic()
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            self.evidence.device_name = torch.cuda.get_device_name(self.device)
        else:
            from evalfarm.devices import cpu_name

            self.evidence.device_name = cpu_name()
        num_threads = torch.get_num_threads()
        set_clean_state(num_threads)
        torch.set_grad_enabled(False)
        mark = SetupClock(t0, self.setup_phases)
        mark("setup_device")
        shared = self.shared if self.shared is not None and self.window is not None \
            and self.shared.key == self.window.key else None
        if shared is None:
            profile = self.task.resolve_profile(cfg.size_profile, self.device.type)
            ref, ref_model = set_up_reference(self.task, profile, self.device, self.task_facts, self.evidence,
                                              mark, self.correctness_only)
            ref, memo = self._new_memo(ref)
            if memo is not None:  # before the precision gate draws its rounds' inputs
                ref.source.share(memo.secret, correctness_block_rounds(cfg))
            self.precision_gate, self.roofline_counts, self.evidence.precision = set_up_precision(
                ref_model, ref.source, ref.out_struct, self.device, cfg, self.rng, mark,
                self.correctness_only)  # converts ref_model to float64
            model64 = None
            if self.window is not None and self.precision_gate is not None:
                model64 = ref_model.to("cpu")  # kept for the window's later candidates, off the device
            del ref_model
        else:
            # A later candidate of a task window (evalfarm.judge.task_window): the task's set-up is
            # kept, the inputs' secret and everything drawn from it are new.
            profile = shared.profile
            ref = dataclasses.replace(shared.reference, source=shared.reference.source.fresh())
            memo = shared.memo
            if memo is not None:
                ref.source.share(memo.secret, correctness_block_rounds(cfg))
            self.roofline_counts = shared.counts
            self.precision_gate, self.evidence.precision = refresh_precision(
                shared, ref.source, self.device, cfg, self.rng, mark, self.correctness_only)
        self.evidence.size_profile = profile
        self.reference = ref
        if ref.degenerate:
            self.evidence.task_flags["degenerate"] = ref.degenerate
        self.bounds = Bounds(cfg, ref.t_ref)
        link = self.link
        memory = self.rounds_memory = allocate_arenas(
            cfg, self.correctness_only, ref, self.device, self.block_rounds,
            {REFERENCE: link.ref, CANDIDATE: link.cand}, self.evidence, arenas,
            INPUT_SLACK_BYTES if self.switches.place_calls else 0, self.switches.arena_budget_bytes)
        self.block_rounds, self.timed = memory.block_rounds, memory.timed
        link.arenas = memory.arenas
        mark("setup_arenas")
        if shared is None:
            self.floor, flush_bytes = device_facts(self.device, ref.out_struct)
        else:
            self.floor, flush_bytes = shared.floor, shared.flush_bytes
        self.evidence.inputs_on_device = ref.source.on_device
        if (self.switches.prepare_ahead or self.timed) and self.device.type == "cuda":
            # The judge's quiet-GPU probe (Link.judge_waits_quiet), its idle latency measured now, before
            # any candidate code has run (nothing of the candidate's can be on the device yet).
            link.quiet_probe = QuietProbe(torch, self.device, lambda: torch.cuda.synchronize(self.device))
        if self.trace is not None and self.device.type == "cuda":
            self.trace.clock_reader = nvml_clock_reader(*cuda_identity(torch.cuda.get_device_properties(self.device)))
        mark("setup_device_facts")
        self.phases["judge_setup"] = time.monotonic() - t0
        if self.window is not None:
            self.evidence.task_window = self.window.evidence(shared is not None)
            if shared is None:
                assert self.roofline_counts is not None
                self.task_setup = TaskSetup(self.window.key, profile, ref, model64, self.roofline_counts,
                                            self.floor, flush_bytes, self.phases["judge_setup"], memo)
            else:
                self.task_setup = shared
                self.evidence.task_window["setup_spared_s"] = round(shared.setup_s, 4)

        t_load = time.monotonic()
        self._phase("load")
        common = {
            "device": "cuda:0" if self.device.type == "cuda" else "cpu",
            "limits": dataclasses.asdict(sandbox.Limits(
                memory_bytes=None if self.device.type == "cuda" else cfg.memory_limit_bytes,
                file_size_bytes=cfg.file_size_limit_bytes)),
            "num_threads": num_threads, "init_inputs": ref.init_inputs, "weight_seed": ref.weight_seed,
            "flush_bytes": flush_bytes, "tuple_out": ref.tuple_out,
            "warm_calls": self.config.warm_calls,  # whether a worker keeps its first inputs for them
            "prepare_ahead": self.switches.prepare_ahead,  # whether it prepares its next call after each reply
            # whether its timed calls are placed anew (evalfarm.judge.placement); each worker its own seed
            "place_calls": self.switches.place_calls and self.timed,
        }
        for worker in (link.ref, link.cand):  # no candidate code has run: a failure here is the farm's
            await_started(worker, cfg.load_timeout_s)
        # CPU: the evaluation's threads and one more (its protocol and the runtime's own threads),
        # the same for both workers; a tree that wants more is held back, not the neighbours.
        cores = worker_cpu_cores(num_threads)
        cgroup_notes = sorted({w.limit_cgroup(cfg.memory_limit_bytes, cores) for w in (link.ref, link.cand)})
        # Both load at once; the reference worker takes its quiet-GPU baseline before building the task.
        framing.send_pickle(link.ref.conn, reference_load({**common, "place_seed": secrets.randbits(63)}, self.task,
                                                       profile, memory, self.switches.reference_poison))
        framing.send_pickle(link.cand.conn, candidate_load({**common, "place_seed": secrets.randbits(63)}, ref, memory,
                                                       self.candidate))
        ready = link.recv(link.ref, cfg.load_timeout_s, "loading the reference")
        if ready.get("op") != "ready":
            raise_worker_error(ready, link.ref)
        ref_gate = ready.get("gate") is True
        ready = link.recv(link.cand, cfg.load_timeout_s, "loading the candidate")
        # Timed blocks need both gates (the worker's isolation notes say why one is missing); the
        # candidate's report only ever turns them off, to the lone calls every worker runs.
        self.timed = self.timed and ref_gate and ready.get("gate") is True
        # Also when the load failed: the evidence names what was in force.
        self.evidence.isolation = evidence.isolation(ready, bool(self.block_rounds), self.timed, self.config.warm_calls,
                                                     self.switches.reference_poison, cgroup_notes)
        if ready.get("op") != "ready":
            raise_worker_error(ready, link.cand)
        link.stop(REFERENCE)
        link.stop(CANDIDATE)
        self.evidence.build["worker_extensions"] = ready.get("extensions", [])
        raised = extension_facts.worker_build_failures(ready.get("build_failures"))
        if raised:  # build failures the candidate caught and went on past
            self.evidence.build["worker_build_failures"] = raised
        self.candidate.check_symbols(ready.get("extensions", []), cfg.guard_policy, self._tmp, self.evidence)
        self.phases["load"] = time.monotonic() - t_load
        if self._hold is not None:
            self._hold.ask()
            self.phases["held_for_standby"] = 0.0  # the wait left once correctness is done
        if self.timed:
            assert memory.staging_layout is not None
            self.pair = TimedPair(memory.staging, memory.staging_layout)
        self.planner = RoundPlanner(memory.arenas, ref.source, ref.out_struct, self.rng, self.device,
                                    memory.rounds_per_batch, self.block_rounds, cfg.num_correctness_inputs,
                                    self.timed, self.trace, memory.input_slack,
                                    random.Random(secrets.randbits(63)), memory.timed_rounds_per_batch)
        if self.switches.draw_ahead and memory.room_to_draw_ahead:
            self.planner.ahead = DrawAhead(ref.source, self.device, self.round_phases)
        # Blocks of half a batch each, one's audits beside the next one's reference calls, where
        # half a batch is still a block (evalfarm.judge.audit_overlap).
        self.planner.pipelined = (self.switches.audit_overlap and bool(self.block_rounds)
                                  and memory.rounds_per_batch // 2 >= min_block_rounds(self.timed))
        self.audit = RoundAudit(memory.arenas, ref.tuple_out, cfg.tolerance, ref.mutates_inputs)
        if memo is not None:
            self.memo_rounds = MemoRounds(memo, ref.source, functools.partial(self.audit.outputs, role=REFERENCE),
                                          ref.tuple_out)
        try:
            result = self._measure()
        finally:
            if self.evidence.task_window:
                self.evidence.task_window["reference_memo"] = (
                    memo.evidence(self.memo_rounds.reused if self.memo_rounds is not None else 0)
                    if memo is not None else {"off": self._memo_off_reason(ref)})
        if result.ok and not self.correctness_only and self.evidence.timing is not None:
            self.evidence.roofline = self._roofline(self.evidence.timing)
        if self.diagnostics.profile_dir and not self.correctness_only:
            self.evidence.diagnostics["profile"] = self._profile(profile)
        if result.ok and not self.correctness_only and (ready.get("extensions") or self.candidate.failed_extensions
                                                        or raised):
            self.evidence.build["own_kernels"] = self._own_kernels(bool(ready.get("extensions")))
        return result

    def _precision_round(self, plan: RoundPlan, ref_out: Any, cand_out: Any) -> None:
        """A gated round's outputs into the precision gate; INCORRECT after the last one when the
        candidate is less precise than the reference."""
        gate = self.precision_gate
        assert gate is not None
        try:
            problem = gate.add(plan.r, plan.inputs, flatten_output(ref_out), flatten_output(cand_out))
        except Exception as err:  # noqa: BLE001 - the farm's problem: the gate is dropped, with a note
            self.precision_gate = None
            self.evidence.precision = precision.not_applied(
                f"dropped at round {plan.r}: {type(err).__name__}: {str(err)[:300]}", gate.notes)
            return
        self.evidence.precision = gate.evidence()
        if problem:
            raise Verdicted(Verdict.INCORRECT, f"precision gate ({self.evidence.precision['rounds']} of the "
                            f"{self.config.num_correctness_inputs} correctness inputs): {problem}")

    def _roofline(self, timing: TimingEvidence) -> dict[str, Any]:
        """``evidence.roofline`` of an OK result (evalfarm.judge.roofline)."""
        counts = self.roofline_counts
        assert counts is not None
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            dram = self.floor.dram or dram_peak(*cuda_identity(props))
            peaks = roofline.peaks("cuda", props.name, (props.major, props.minor), counts.dtype,
                                   dram.bytes_per_s, dram.note)
        else:
            peaks = roofline.peaks("cpu", self.evidence.device_name, None, counts.dtype)
        return roofline.evidence(counts, timing.ref_time_us_median, timing.cand_time_us_median, peaks)

    # --- diagnostics (never a verdict) ----------------------------------------------
    def _profile(self, size_profile: str) -> dict[str, Any]:
        """--profile: one extra, untimed candidate call under the torch profiler, with fresh inputs,
        after every timed round; the trace is copied out of the worker's directory. Then an Nsight
        Compute report of one call where ncu exists (evalfarm.judge.diagnose). Never a verdict."""
        inputs = [v.contiguous() if isinstance(v, torch.Tensor) else v for v in self.reference.source.inputs(PROFILE_INPUT_INDEX)]
        spec = diagnose.write_inputs(self.rounds_memory.arenas[CANDIDATE, "in"], inputs)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        # A subdirectory of the worker's own directory that stays the host's (the rest of that
        # directory is a tmpfs of the worker's mount namespace, which the judge cannot see).
        worker_dir = os.path.join(self._tmp, CANDIDATE, PROFILE_DIR)
        os.makedirs(worker_dir, exist_ok=True)
        os.chmod(worker_dir, 0o777)  # the worker may run as an unprivileged uid
        self.link.resume(CANDIDATE)
        try:
            framing.send_json(self.link.cand.conn, {"op": "profile", "in": spec, "dir": worker_dir})
            msg = framing.recv_json(self.link.cand.conn, PROFILE_TIMEOUT_S + self.bounds.call_limit_s())
        except (TimeoutError, OSError, framing.PeerClosed, framing.ProtocolError) as err:
            msg = {"op": "profile_failed", "detail": f"the candidate worker did not answer: {type(err).__name__}"}
        finally:
            self.link.stop(CANDIDATE)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES_FOR_WORKER", "") or _visible(str(self.device.index or 0))
        return diagnose.finish_profile(
            str(self.diagnostics.profile_dir), worker_dir, msg, device=str(self.device), tmp=self._tmp,
            visible=visible, size_profile=size_profile, spec={
                "task_name": self.task.name, "task_source": self.task.source, "size_profiles": self.task.size_profiles,
                "profile": size_profile, "candidate_source": self.candidate.source,
                "cache_dir": self.candidate.staged_cache(), "arch": self.candidate.arch})

    def _own_kernels(self, loaded: bool) -> dict[str, Any]:
        """How much of the candidate's GPU time runs in its own extensions' kernels: one extra,
        untimed call under the CUDA profiler with fresh inputs (evalfarm.judge.extension_facts).
        Evidence for a learner, never a verdict."""
        if not loaded:
            return extension_facts.no_own_extension()
        if self.device.type != "cuda":
            return extension_facts.not_measured(extension_facts.CPU_NOTE)
        if not self.candidate.extension_files:
            return extension_facts.not_measured("the built extensions were not found to read their names")
        own, note = extension_facts.own_kernel_names(self.candidate.extension_files)
        inputs = [v.contiguous() if isinstance(v, torch.Tensor) else v for v in self.reference.source.inputs(KERNELS_INPUT_INDEX)]
        spec = diagnose.write_inputs(self.rounds_memory.arenas[CANDIDATE, "in"], inputs)
        torch.cuda.synchronize(self.device)
        self.link.resume(CANDIDATE)
        try:
            framing.send_json(self.link.cand.conn, {"op": "kernels", "in": spec})
            reply = framing.recv_json(self.link.cand.conn, PROFILE_TIMEOUT_S + self.bounds.call_limit_s())
        except (TimeoutError, OSError, framing.PeerClosed, framing.ProtocolError) as err:
            reply = {"op": "kernels_failed", "detail": f"the candidate worker did not answer: {type(err).__name__}"}
        finally:
            self.link.stop(CANDIDATE)
        return extension_facts.kernel_share(reply, own, note)

    def _save_failing(self, plan: RoundPlan, reason: str, ref_out: list[Any], cand_out: list[Any]) -> None:
        """--save-failing-input: the judge writes the failing round's tensors (never the worker)."""
        if not self.diagnostics.failing_input_dir or "failing_input" in self.evidence.diagnostics:
            return
        try:
            self.evidence.diagnostics["failing_input"] = diagnose.save_failing_round(
                self.diagnostics.failing_input_dir, task=self.task.name, round_index=plan.r, reason=reason,
                inputs=plan.inputs, reference=ref_out, candidate=cand_out, size_profile=self.evidence.size_profile)
        except (OSError, RuntimeError) as err:
            self.evidence.diagnostics["failing_input"] = {"note": f"could not write the failing input: {err}"}

    def _save_structure_failure(self, plan: RoundPlan, detail: str) -> None:
        """--save-failing-input for an output of the wrong type, shape, dtype or device: the round's
        inputs and, when the reference already ran in this round, its output; the candidate's output
        never reached the judge (the worker refused it), so that file holds an empty list."""
        ref_out: list[Any] = []
        if plan.kept_reference is not None:
            ref_out = flatten_output(plan.kept_reference)
        elif plan.first == REFERENCE and plan.calls[REFERENCE].out_slots:
            arena = self.rounds_memory.arenas[REFERENCE, "out"]
            ref_out = [arena.view(s) for s in plan.calls[REFERENCE].out_slots]
        self._save_failing(plan, f"structure: {detail}" + ("" if ref_out else " (the reference had not run yet in "
                           "this round: its output is not saved)"), ref_out, [])

    # --- rounds ----------------------------------------------------------------------
    def _measure(self) -> ScoreResult:
        cfg = self.config
        n_correct = cfg.num_correctness_inputs
        audits = AuditSchedule(cfg.audit_fraction, n_correct, self.rng)
        samples = Samples()
        counts = RoundCounts()
        charges = Charges()
        self._worst = Comparison(ok=True)
        r = 0
        # Calls before the first timed round may build, autotune or compile lazily: together they
        # get first_call_timeout_s on top of the per-call bound.
        allowance = cfg.first_call_timeout_s
        start = time.monotonic()
        self._phase("correctness")
        timing_start: float | None = None
        # Times count from the first batch planned after the owner's go (RoundsHold); before it a
        # standby judge of this device may still be starting up, so those rounds are only checked.
        counted_from: float | None = start if self._hold is None else None
        # Correctness rounds run in blocks: checked, never timed. With any, the timed rounds all
        # come after correctness; the budget still counts from the first round, but the minimum
        # timed rounds are collected even when correctness used it up.
        blocks = self.block_rounds
        stable = True
        acc = self.round_phases
        fail = self._raise_call_error
        # The last correctness block's audits, running beside the next block's reference calls
        # (evalfarm.judge.audit_overlap); finished before the candidate's process runs again.
        looking: AuditLook | None = None
        while True:
            if counted_from is None and self._hold is not None and self._hold.released():
                counted_from = time.monotonic()
            counted = counted_from is not None
            if self.trace is not None:
                self.trace.counted = counted
            t_step = time.monotonic()
            try:
                plans = self.planner.plan(r, audits, warm_call_wanted(cfg.warm_calls, self.bounds.reference_call_s()))
            except BaseException:
                if looking is not None:
                    looking.join()  # no thread outlives the rounds
                raise
            acc["rounds_inputs"] += time.monotonic() - t_step
            if plans[0].r in blocks:  # the planner keeps a batch on one side of the blocks' edges
                # Meanwhile the next batch's inputs are drawn, where it is a block too (draw_ahead),
                # and the last block's audits finished beside this one's reference calls.
                self.planner.draw_next_block(r + len(plans))
                earlier, looking = looking, None
                try:
                    run_block(self.link, self.bounds, cfg, plans, self.block_log, fail,
                              None if earlier is None else functools.partial(self._finish_look, earlier, counts, samples),
                              self.memo_rounds)
                except BaseException:
                    if earlier is not None and not earlier.done:
                        self._finish_look(earlier, counts, samples)  # an earlier round's verdict comes first
                    raise
                finally:
                    if self.planner.ahead is not None:
                        self.planner.ahead.join()
                counts.in_blocks += len(plans)
                if self.planner.pipelined and r + len(plans) in blocks:
                    looking = AuditLook(self.audit, plans, self.device, acc)
                    r += len(plans)
                    continue
            elif plans[0].block_call is not None:
                assert self.pair is not None
                self.pair.run_pair(self.link, self.bounds, plans, fail)
                counts.timed_block_rounds += len(plans)
            else:
                for plan in plans:
                    allowance = run_lone_round(self.link, self.bounds, cfg, plan, allowance, fail)
            # Audits run only now, with both workers idle: judge work on the device never
            # overlaps a timed call. First one look at all of them (RoundAudit.prechecked).
            t_step = time.monotonic()
            checked = self.audit.prechecked([plan for plan in plans if plan.audited])
            acc["rounds_audit"] += time.monotonic() - t_step
            self._check_batch(plans, checked, counts, samples, counted)
            r += len(plans)
            if r < n_correct:
                continue
            if self.correctness_only:
                self.evidence.correctness_inputs = n_correct
                self.phases["correctness"] = time.monotonic() - start
                return self._result(Verdict.OK, None, "")
            if counted_from is None and self._hold is not None:
                # Nothing left to check while the standby starts up: wait for it (bounded). The
                # timing phase (and its budget) begins after the wait.
                t_hold = time.monotonic()
                self.phases["correctness"] = t_hold - start
                self._hold.released(wait=True)
                counted_from = timing_start = time.monotonic()
                self.phases["held_for_standby"] = counted_from - t_hold
                self._phase("timing")
                continue
            if timing_start is None:
                timing_start = time.monotonic()
                self.phases["correctness"] = timing_start - start
                self._phase("timing")
            charges = Charges.of(samples, cfg.exchange_charged)
            speedups = samples.speedups(charges.charge)
            stats = bucket_stats(speedups, cfg.num_buckets) if len(speedups) >= cfg.num_buckets else None
            d = decide(stats, elapsed_s=time.monotonic() - (counted_from or start), budget_s=cfg.timing_budget_s,
                       min_rounds_first=bool(blocks) or self.timed,
                       min_rounds=cfg.min_timed_rounds, target_ci=cfg.target_ci,
                       max_bucket_variance=cfg.max_bucket_variance,
                       remeasures_left=MAX_REMEASURES - counts.remeasured)
            if d.discard:
                counts.remeasured += 1
                samples = Samples()  # the round counts run on
                continue
            if d.stop and stats is not None:  # without stats, keep going until num_buckets rounds
                stable = d.stable
                break
        self.evidence.correctness_inputs = n_correct
        self.phases["timing"] = time.monotonic() - (timing_start or start)
        timing = evidence.timing_evidence(stats, stable, samples, counts, charges, self.block_log.summary(),
                                          self.timed, time.monotonic() - start)
        self.evidence.guards.extend(charges.notes(timing))
        self.evidence.guards.extend(evidence.timing_notes(timing, samples, self.link.quiet_waits))
        self.evidence.timing = timing
        behind = clock_behind_events(samples.clock_pairs)
        if behind:
            raise Verdicted(Verdict.HACK_DETECTED, f"guard clock_behind_events: {behind}")
        if self.device.type == "cuda":
            floor.gate(self.floor, timing, self.evidence)
        if not stable:
            self.evidence.guards.append("timing_unstable: bucket spread stayed above the limit")
        score = conservative_round(stats.score)
        degenerate = self.reference.degenerate
        if degenerate:
            self.evidence.guards.append(f"task_degenerate: {degenerate}; no speedup is paid on this task "
                                        f"(measured {stats.score:.3g}x, reported 1.00)")
            score = 1.0
        return self._result(Verdict.OK, score, "")

    def _check_batch(self, plans: list[RoundPlan], checked: dict[int, Comparison], counts: RoundCounts,
                     samples: Samples, counted: bool) -> None:
        """Every round of a batch that ran, in round order: each audited one checked (``checked``: the
        rounds RoundAudit found passing, with their Comparisons), each timed one's times kept as a
        sample where they count (``counted``: the batch ran after the owner's go)."""
        cfg = self.config
        acc = self.round_phases
        for plan in plans:
            if plan.audited:
                counts.audited += 1
                t_step = time.monotonic()
                c = self._audit(plan, in_correctness=plan.r < cfg.num_correctness_inputs, passed=checked.get(plan.r))
                acc["rounds_audit"] += time.monotonic() - t_step
                if c.rel_l2_error >= self._worst.rel_l2_error:
                    self._worst = c
                    self.evidence.worst_error = {**c.to_dict(), "round": plan.r}
            if plan.r in self.block_rounds:
                continue  # checked above; its inputs were written before its block: never timed
            if self.timed and (plan.block_call is None or plan.block_call < WARMUP_CALLS):
                continue  # with timed blocks only their calls are samples (a block's first: checked only)
            if plan.r >= cfg.warmup_rounds and not counted:
                counts.set_aside += 1  # checked above; its times are not used
            elif plan.r >= cfg.warmup_rounds:
                samples.add(plan, self.timed)

    def _finish_look(self, look: AuditLook, counts: RoundCounts, samples: Samples) -> None:
        """A correctness block's audits that ran beside the next block's reference calls: the
        thread joined, then every round checked as ``_check_batch`` checks it (raising its verdict)."""
        look.done = True
        t_step = time.monotonic()
        checked = look.result()
        self.round_phases["rounds_audit"] += time.monotonic() - t_step
        self._check_batch(look.plans, checked, counts, samples, True)

    def _audit(self, plan: RoundPlan, in_correctness: bool, passed: Comparison | None = None) -> Comparison:
        """Check one round's candidate output and inputs against the reference worker's; raise
        Verdicted, or return the comparison. ``passed``: what RoundAudit.prechecked found for the
        round (its outputs pass, its inputs untouched), so neither needs another look."""
        audit = self.audit
        c = passed if passed is not None else audit.compare(plan)
        gate = self.precision_gate
        if not c.ok:
            if in_correctness:
                self._save_failing(plan, c.reason, flatten_output(audit.outputs(plan, REFERENCE)),
                                   flatten_output(audit.outputs(plan, CANDIDATE)))
                # A gated round also says whether the candidate is less precise than the reference.
                more = ""
                if gate is not None:
                    more = gate.describe_round(plan.r, plan.inputs, flatten_output(audit.outputs(plan, REFERENCE)),
                                               flatten_output(audit.outputs(plan, CANDIDATE)))
                    self.evidence.precision = gate.evidence()
                raise Verdicted(Verdict.INCORRECT, f"correctness input {plan.r + 1} of "
                                f"{self.config.num_correctness_inputs}: {c.reason}" + (f"; {more}" if more else ""))
            raise Verdicted(Verdict.HACK_DETECTED, f"guard timed_output_audit: a timed call's output was wrong "
                            f"after all correctness inputs passed (round {plan.r}): {c.reason}")
        if passed is None and audit.input_modified(plan):
            raise Verdicted(Verdict.INCORRECT, f"the candidate modified its input in place (round {plan.r})")
        if in_correctness and gate is not None and gate.expects(plan.r):
            self._precision_round(plan, audit.outputs(plan, REFERENCE), audit.outputs(plan, CANDIDATE))
        return c

    # --- plumbing --------------------------------------------------------------------
    def _raise_call_error(self, role: str, res: dict[str, Any], plan: RoundPlan | None) -> None:
        """A worker's failed call as its verdict; a candidate's wrong output structure in a
        correctness round (``plan``, the round the report names) is saved as a failing input first."""
        if (role == CANDIDATE and res.get("kind") == "structure" and plan is not None
                and plan.r < self.config.num_correctness_inputs):
            self._save_structure_failure(plan, str(res.get("detail", ""))[:2000])
        raise_worker_error(res, self.link.worker(role))

    def _result(self, verdict: Verdict, speedup: float | None, detail: str,
                cause: InfraCause = InfraCause.OTHER) -> ScoreResult:
        return evidence.result(self.evidence, verdict, speedup, detail, self.task.name, self.device, self.phases,
                               self.round_phases, self.setup_phases, cause)
