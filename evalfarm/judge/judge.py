"""The trusted judge: owns the inputs, the reference outputs and the verdict.

Started per evaluation as ``python -m evalfarm.judge.judge FD`` by ``evalfarm.scoring``.
It builds the reference from the task, starts a fresh candidate worker, feeds it rounds
of fresh inputs through shared memory, and checks every correctness round and a random
sample of timed rounds against its own reference outputs, which the worker never sees.
The score is computed here from the paired timings the worker reports.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import time
import traceback
from typing import Any

import torch

from evalfarm import sandbox
from evalfarm.compare import Comparison, compare_outputs, flatten_output
from evalfarm.config import ScoreConfig
from evalfarm.devices import DramPeak, dram_peak
from evalfarm.judge import wire
from evalfarm.judge.arena import Arena, aligned, shm_dir
from evalfarm.judge.inputs import InputSource
from evalfarm.judge.state import set_clean_state
from evalfarm.result import Evidence, ScoreResult, TimingEvidence
from evalfarm.tasks.format import Task, instantiate_task
from evalfarm.timing import bucket_stats, conservative_round, decide
from evalfarm.verdict import Verdict

log = logging.getLogger("evalfarm.judge")

ARENA_BUDGET_BYTES = {"cpu": 256 << 20, "cuda": 1 << 30}
MAX_ROUNDS_PER_BATCH = 32
ROUND_SLACK_S = 2.0
MAX_REMEASURES = 2


class Verdicted(Exception):
    """Ends an evaluation early with a verdict."""

    def __init__(self, verdict: Verdict, detail: str) -> None:
        super().__init__(detail)
        self.verdict = verdict
        self.detail = detail


@dataclasses.dataclass
class RoundPlan:
    r: int
    first: str
    audited: bool
    inputs: list[Any]  # the judge's own copies (pristine)
    expected: Any | None  # judge's reference output when audited
    cand_slots: list[Any]
    out_slots: list[Any]
    wire: dict[str, Any] = dataclasses.field(default_factory=dict)


class WorkerHandle:
    """The candidate process: started in its own session, killed as a group."""

    def __init__(self, device: str, tmp: str) -> None:
        self.conn, child_sock = wire.channel_pair()
        self.stderr_path = os.path.join(tmp, "worker.stderr")
        self._stderr = open(self.stderr_path, "wb")  # a file, so a chatty candidate never blocks on a pipe
        fd = child_sock.fileno()
        extra = {}
        if "EVALFARM_WORKER_NETNS" in os.environ:  # "0" lets a deployment keep the host's network
            extra["EVALFARM_WORKER_NETNS"] = os.environ["EVALFARM_WORKER_NETNS"]
        if device.startswith("cuda"):
            idx = device.split(":")[1] if ":" in device else "0"
            extra["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES_FOR_WORKER", "") or _visible(idx)
        self.proc = subprocess.Popen(
            [*sandbox.python_cmd("evalfarm.judge.worker"), str(fd)],
            pass_fds=(fd,), cwd=tmp, env=sandbox.clean_env(tmp, extra), start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
        )
        child_sock.close()

    def exit_description(self) -> str:
        code = self.proc.poll()
        if code is None:
            try:
                code = self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                return "candidate process stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return f"candidate process died with signal {name}"
        return f"candidate process exited with code {code}"

    def stderr_tail(self) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.stderr_path) - 4000))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self) -> None:
        try:
            wire.send_json(self.conn, {"op": "exit"})
        except (OSError, ValueError):
            pass
        sandbox.kill_group(self.proc, grace_s=0.5)
        self.conn.close()
        self._stderr.close()


def _visible(idx: str) -> str:
    """Map our device index through the judge's own CUDA_VISIBLE_DEVICES."""
    parent = os.environ.get("CUDA_VISIBLE_DEVICES")
    if parent:
        ids = parent.split(",")
        return ids[int(idx)] if int(idx) < len(ids) else idx
    return idx


def _versions() -> dict[str, str]:
    import platform

    from evalfarm import __version__

    return {"evalfarm": __version__, "torch": torch.__version__, "cuda": str(torch.version.cuda),
            "python": platform.python_version()}


def _clocks(device: torch.device) -> dict[str, Any]:
    if device.type != "cuda":
        return {}
    try:
        idx = device.index or 0
        out = subprocess.run(
            ["nvidia-smi", f"--id={_visible(str(idx))}",
             "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw",
             "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5)
        vals = [v.strip() for v in out.stdout.strip().split(",")]
        keys = ["sm_mhz", "mem_mhz", "max_sm_mhz", "temp_c", "power_w"]
        return dict(zip(keys, vals, strict=False)) if out.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired):
        return {}


def _tensors_bytes(values: list[Any]) -> int:
    return sum(aligned(v.numel() * v.element_size()) for v in values if isinstance(v, torch.Tensor))


def _check_ref_output(out: Any) -> None:
    for o in flatten_output(out):
        if not isinstance(o, torch.Tensor):
            raise Verdicted(Verdict.INFRA_ERROR, f"the task's Model returned {type(o).__name__}, not tensors")


@dataclasses.dataclass(frozen=True)
class FloorCheck:
    """The physical-floor gate's arithmetic and what it concluded (``physical_floor``)."""

    applied: bool  # False: the gate could not say anything sound here (see note)
    violated: bool
    output_bytes: int
    l2_bytes: int | None
    peak_dram_bytes_s: float | None
    floor_us: float | None
    cand_time_us_median: float
    ref_time_us_median: float
    note: str = ""

    @property
    def reason(self) -> str:
        """The verdict's detail when violated."""
        if not self.violated or self.floor_us is None or self.peak_dram_bytes_s is None or self.l2_bytes is None:
            return ""
        return (f"guard physical_floor: the candidate's median call took {self.cand_time_us_median:.2f} us, less "
                f"than the {self.floor_us:.2f} us it takes to write its {self.output_bytes / 1e6:.1f} MB of "
                f"outputs at the device's peak DRAM bandwidth ({self.peak_dram_bytes_s / 1e12:.2f} TB/s; at most "
                f"the {self.l2_bytes / 1e6:.1f} MB L2 can hold the rest): the timing does not cover the work")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def physical_floor(output_bytes: int, l2_bytes: int | None, peak_dram_bytes_s: float | None,
                   cand_us: float, ref_us: float, peak_note: str = "") -> FloorCheck:
    """Is the candidate's median call shorter than writing its outputs can physically take?

    A correct call leaves every output byte written; at the end of the call at most the L2's
    worth of them can still sit in the (write-back) cache, so at least ``output_bytes - l2_bytes``
    went to DRAM, which takes at least that over the peak DRAM bandwidth. The bound is from the
    device's specification (NVML), never from a measurement, so load on the host or the device
    can only make honest calls slower, never the floor higher. It applies only when the outputs
    exceed twice the L2 (smaller outputs can live in cache) and when the reference's own median
    call is not below it (a reference that beats the floor returns views, or the bandwidth
    reading is wrong: either way the bound says nothing here). Equal to the floor is fine.
    """
    def skip(note: str, floor_us: float | None = None) -> FloorCheck:
        return FloorCheck(False, False, output_bytes, l2_bytes, peak_dram_bytes_s, floor_us, cand_us, ref_us, note)

    if l2_bytes is None or l2_bytes <= 0:
        return skip("not applied: L2 size unknown")
    if output_bytes <= 2 * l2_bytes:
        return skip(f"not applied: the outputs ({output_bytes} bytes) fit in twice the L2 ({l2_bytes} bytes)")
    if peak_dram_bytes_s is None or not peak_dram_bytes_s > 0 or not math.isfinite(peak_dram_bytes_s):
        return skip(f"not applied: peak DRAM bandwidth unknown ({peak_note or 'no NVML reading'})")
    floor_us = (output_bytes - l2_bytes) / peak_dram_bytes_s * 1e6
    if not ref_us >= floor_us:
        return skip(f"not applied: the reference's own median call ({ref_us:.2f} us) is below the floor "
                    f"({floor_us:.2f} us), so its outputs are not all written in the call", floor_us)
    violated = cand_us < floor_us
    return FloorCheck(True, violated, output_bytes, l2_bytes, peak_dram_bytes_s, floor_us, cand_us, ref_us,
                      peak_note)


def _cuda_identity(props: Any) -> tuple[str | None, tuple[int, int, int] | None]:
    """(UUID, (PCI domain, bus, device)) of a CUDA device as the runtime reports it; None where unknown."""
    uuid = None
    raw = getattr(props, "uuid", None)
    if raw is not None:
        text = str(raw)
        bare = text[4:] if text.startswith(("GPU-", "MIG-")) else text
        if len(bare) == 36 and all(c in "0123456789abcdefABCDEF-" for c in bare):
            uuid = text
    pci = None
    try:
        pci = (int(props.pci_domain_id), int(props.pci_bus_id), int(props.pci_device_id))
    except (AttributeError, TypeError, ValueError):
        pass
    return uuid, pci


class Judge:
    def __init__(self, request: dict[str, Any], report_pgid: Any) -> None:
        self.config = ScoreConfig.from_dict(request["config"])
        self.task = Task(name=request["task_name"], source=request["task_source"],
                         size_profiles=request.get("size_profiles") or {})
        self.candidate_source = request["candidate_source"]
        self.cache_dir = request["cache_dir"]
        self.arch = request["arch"]
        self.report_pgid = report_pgid
        self.device = torch.device("cuda:0" if self.config.device == "cuda" else self.config.device)
        self.evidence = Evidence(device=str(self.device), versions=_versions())
        self.phases: dict[str, float] = {}
        self.rng = random.Random(secrets.randbits(64))

    # --- the evaluation ---------------------------------------------------------------
    def run(self) -> ScoreResult:
        tmp = sandbox.make_private_tmp("evalfarm-eval-")
        worker = None
        arenas: list[Arena] = []
        try:
            # The worker starts first: its interpreter and torch import overlap our set-up.
            worker_device = self.config.device if self.config.device != "cuda" else "cuda:0"
            worker = WorkerHandle(worker_device, tmp)
            self.report_pgid(worker.proc.pid)
            return self._evaluate(worker, tmp, arenas)
        except Verdicted as v:
            return self._result(v.verdict, None, v.detail)
        finally:
            if worker is not None:
                worker.close()
            for a in arenas:
                a.close()
            sandbox.wipe(tmp)

    def _evaluate(self, worker: WorkerHandle, tmp: str, arenas: list[Arena]) -> ScoreResult:
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
        profile = self.task.resolve_profile(cfg.size_profile, self.device.type)
        self.evidence.size_profile = profile
        try:
            task_mod = instantiate_task(self.task, profile)
            self.source = InputSource(task_mod, str(self.device))
            init_inputs = self.source.init_inputs()
            weight_seed = self.source.weight_seed()
            torch.manual_seed(weight_seed)
            self.ref_model = task_mod.Model(*init_inputs).to(self.device)
            sample = self.source.inputs(-1)
            sample_copy = [v.clone() if isinstance(v, torch.Tensor) else v for v in sample]
            ref_out, t_ref = self._ref_call(sample)
            ref_out, t_ref = self._ref_call(sample_copy)  # second call: warm
        except Verdicted:
            raise
        except Exception:  # noqa: BLE001 - the task itself is broken: not the candidate's fault
            raise Verdicted(Verdict.INFRA_ERROR, "the task failed to run:\n" + traceback.format_exc()[-4000:]) from None
        _check_ref_output(ref_out)
        self.ref_mutates_inputs = any(
            isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(sample, self.source.inputs(-1), strict=False)
        )
        self.t_ref_est = t_ref
        self.tuple_out = isinstance(ref_out, tuple | list)
        self.out_struct = [(tuple(o.shape), o.dtype) for o in flatten_output(ref_out)]
        in_bytes = _tensors_bytes(sample)
        out_bytes = sum(aligned(math.prod(s) * d.itemsize) for s, d in self.out_struct)
        budget = ARENA_BUDGET_BYTES["cuda" if self.device.type == "cuda" else "cpu"]
        per_round = 2 * in_bytes + out_bytes
        self.rounds_per_batch = max(1, min(MAX_ROUNDS_PER_BATCH, budget // max(per_round, 1)))
        self.in_arena = Arena.allocate(2 * in_bytes * self.rounds_per_batch, str(self.device), shm_dir(tmp))
        arenas.append(self.in_arena)
        self.out_arena = Arena.allocate(out_bytes * self.rounds_per_batch, str(self.device), shm_dir(tmp))
        arenas.append(self.out_arena)
        flush_bytes = 0
        self.floor_output_bytes = sum(math.prod(s) * d.itemsize for s, d in self.out_struct)
        self.l2_bytes: int | None = None
        self.dram: DramPeak | None = None
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0) or None
            flush_bytes = 2 * (self.l2_bytes or 50 << 20)
            if self.l2_bytes is not None and self.floor_output_bytes > 2 * self.l2_bytes:
                self.dram = dram_peak(*_cuda_identity(props))  # NVML; overlaps the worker's start-up
        self.evidence.inputs_on_device = self.source.on_device
        self.phases["judge_setup"] = time.monotonic() - t0

        t_load = time.monotonic()
        wire.send_pickle(worker.conn, {
            "device": "cuda:0" if self.device.type == "cuda" else "cpu",
            "limits": dataclasses.asdict(sandbox.Limits(
                memory_bytes=None if self.device.type == "cuda" else cfg.memory_limit_bytes,
                file_size_bytes=cfg.file_size_limit_bytes)),
            "num_threads": num_threads,
            "task_name": self.task.name, "task_source": self.task.source,
            "size_profiles": self.task.size_profiles, "profile": profile,
            "candidate_source": self.candidate_source,
            "init_inputs": init_inputs, "weight_seed": weight_seed,
            "cache_dir": self.cache_dir, "arch": self.arch,
            "in_arena": self.in_arena.handle(), "out_arena": self.out_arena.handle(),
            "flush_bytes": flush_bytes, "tuple_out": self.tuple_out,
        })
        ready = self._recv(worker, cfg.load_timeout_s, "loading the candidate")
        if ready.get("op") != "ready":
            self._raise_worker_error(ready, worker)
        self.evidence.build["worker_extensions"] = ready.get("extensions", [])
        isolation = ready.get("isolation", [])
        if not isinstance(isolation, list) or not all(isinstance(x, str) for x in isolation):
            raise Verdicted(Verdict.HACK_DETECTED, "guard worker_protocol: malformed isolation report")
        self.evidence.isolation = [x[:300] for x in isolation[:8]]
        self._check_symbols(ready.get("extensions", []))
        self.phases["load"] = time.monotonic() - t_load
        return self._measure(worker)

    def _check_symbols(self, extensions: Any) -> None:
        """Static check of every extension the worker loaded, read from the cache (not the worker)."""
        from evalfarm.build.cache import ExtensionCache
        from evalfarm.guards import ElfError, GuardPolicy, check_extension_symbols

        if not isinstance(extensions, list):
            return
        cache = ExtensionCache(self.cache_dir)
        policy = GuardPolicy.from_name(self.config.guard_policy)
        for ext in extensions:
            if not isinstance(ext, dict):
                continue
            key, name = str(ext.get("key", "")), str(ext.get("name", ""))
            if len(key) != 64 or not key.isalnum() or not name.isidentifier():
                raise Verdicted(Verdict.HACK_DETECTED, "guard worker_protocol: malformed extension report")
            so = cache.lookup(key, name)
            if so is None:
                continue
            try:
                findings = check_extension_symbols(so, policy)
            except ElfError as err:
                raise Verdicted(Verdict.INFRA_ERROR, f"cannot read built extension {name}: {err}") from None
            if findings:
                self.evidence.guards.extend(f"{f.guard}: {f.reason}" for f in findings)
                raise Verdicted(Verdict.HACK_DETECTED, f"guard {findings[0].guard}: {findings[0].reason}")

    def _ref_call(self, inputs: list[Any]) -> tuple[Any, float]:
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        out = self.ref_model(*inputs)
        sync()
        return out, time.perf_counter() - t0

    def _call_limit_s(self) -> float:
        return max(self.config.min_call_timeout_s, self.config.timeout_factor * self.t_ref_est)

    # --- rounds ----------------------------------------------------------------------
    def _plan_batch(self, first_round: int, n_correct: int) -> list[RoundPlan]:
        self.in_arena.reset()
        self.out_arena.reset()
        plans = []
        for k in range(self.rounds_per_batch):
            r = first_round + k
            inputs = self.source.inputs(r)
            ref_spec, cand_spec, cand_slots = [], [], []
            for v in inputs:
                if isinstance(v, torch.Tensor):
                    v = v.contiguous()
                    a = self.in_arena.alloc(tuple(v.shape), v.dtype)
                    b = self.in_arena.alloc(tuple(v.shape), v.dtype)
                    self.in_arena.view(a).copy_(v)
                    self.in_arena.view(b).copy_(v)
                    ref_spec.append(["T", a.to_wire()])
                    cand_spec.append(["T", b.to_wire()])
                    cand_slots.append(b)
                else:
                    ref_spec.append(["S", v])
                    cand_spec.append(["S", v])
                    cand_slots.append(None)
            out_slots = [self.out_arena.alloc(s, d) for s, d in self.out_struct]
            # Poison the output slots so a slot the worker never wrote cannot pass.
            for s in out_slots:
                view = self.out_arena.view(s)
                view.fill_(float("nan") if view.is_floating_point() else 0x5A)
            audited = r < n_correct or self.rng.random() < self.config.audit_fraction
            expected = None
            if audited:
                pristine = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
                expected, t = self._ref_call(pristine)
                self.t_ref_est = 0.9 * self.t_ref_est + 0.1 * t
            first = "ref" if self.rng.random() < 0.5 else "cand"
            wire_round = {"r": r, "first": first, "ref": ref_spec, "cand": cand_spec,
                          "out": [s.to_wire() for s in out_slots]}
            plan = RoundPlan(r, first, audited, inputs, expected, cand_slots, out_slots, wire_round)
            plans.append(plan)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return plans

    def _measure(self, worker: WorkerHandle) -> ScoreResult:
        cfg = self.config
        n_correct = cfg.num_correctness_inputs
        speedups: list[float] = []
        t_ref_all: list[int] = []
        t_cand_all: list[int] = []
        e_ref_all: list[float] = []
        e_cand_all: list[float] = []
        worst = Comparison(ok=True)
        audited = 0
        remeasured = 0
        r = 0
        first_batch = True
        start = time.monotonic()
        timing_start: float | None = None
        stable = True
        while True:
            plans = self._plan_batch(r, n_correct)
            wire.send_json(worker.conn, {"op": "rounds", "rounds": [p.wire for p in plans]})
            replies = []
            for plan in plans:
                limit = 2 * self.t_ref_est + self._call_limit_s() + ROUND_SLACK_S
                if first_batch and plan is plans[0]:
                    limit += cfg.first_call_timeout_s
                res = self._recv(worker, limit, f"round {plan.r}")
                if res.get("op") != "round":
                    self._raise_worker_error(res, worker, in_correctness=plan.r < n_correct)
                t_ref, t_cand = _int(res, "t_ref"), _int(res, "t_cand")
                if _int(res, "r") != plan.r or t_ref <= 0 or t_cand <= 0:
                    raise Verdicted(Verdict.HACK_DETECTED, "guard worker_protocol: round results do not match the rounds sent")
                if t_cand / 1e9 > self._call_limit_s() and not (first_batch and plan is plans[0]):
                    raise Verdicted(Verdict.TIMEOUT, f"a call took {t_cand / 1e6:.1f} ms, more than "
                                    f"{cfg.timeout_factor:g}x the reference's {self.t_ref_est * 1e3:.3f} ms")
                replies.append(res)
            # Audits run only now, with the worker idle: judge work on the device must never
            # overlap a timed call.
            for plan, res in zip(plans, replies, strict=True):
                t_ref, t_cand = res["t_ref"], res["t_cand"]
                if plan.audited:
                    audited += 1
                    c = self._audit(plan, in_correctness=plan.r < n_correct)
                    if c.rel_l2_error >= worst.rel_l2_error:
                        worst = c
                        self.evidence.worst_error = {**c.to_dict(), "round": plan.r}
                if plan.r >= cfg.warmup_rounds:
                    speedups.append(t_ref / t_cand)
                    t_ref_all.append(t_ref)
                    t_cand_all.append(t_cand)
                    if isinstance(res.get("e_ref"), int | float) and isinstance(res.get("e_cand"), int | float):
                        e_ref_all.append(float(res["e_ref"]))
                        e_cand_all.append(float(res["e_cand"]))
            first_batch = False
            r += len(plans)
            if r < n_correct:
                continue
            if timing_start is None:
                timing_start = time.monotonic()
                self.phases["correctness"] = timing_start - start
            stats = bucket_stats(speedups, cfg.num_buckets) if len(speedups) >= cfg.num_buckets else None
            d = decide(stats, elapsed_s=time.monotonic() - start, budget_s=cfg.timing_budget_s,
                       min_rounds=cfg.min_timed_rounds, target_ci=cfg.target_ci,
                       max_bucket_variance=cfg.max_bucket_variance,
                       remeasures_left=MAX_REMEASURES - remeasured)
            if d.discard:
                remeasured += 1
                speedups, t_ref_all, t_cand_all, e_ref_all, e_cand_all = [], [], [], [], []
                continue
            if d.stop and stats is not None:  # without stats, keep going until num_buckets rounds
                stable = d.stable
                break
        self.evidence.correctness_inputs = n_correct
        self.phases["timing"] = time.monotonic() - (timing_start or start)
        timing = TimingEvidence(
            rounds=stats.rounds, bucket_means=stats.bucket_means, bucket_variance=stats.relative_variance,
            ci_low=stats.ci_low, ci_high=stats.ci_high, stable=stable, remeasured=remeasured,
            raw_speedup=stats.score,
            ref_time_us_median=statistics.median(t_ref_all) / 1e3, cand_time_us_median=statistics.median(t_cand_all) / 1e3,
            audited_rounds=audited, seconds=time.monotonic() - start,
        )
        if e_cand_all:
            timing.ref_event_us_median = statistics.median(e_ref_all)
            timing.cand_event_us_median = statistics.median(e_cand_all)
            if timing.cand_event_us_median > 0:
                timing.event_wall_gap = timing.cand_time_us_median / timing.cand_event_us_median
                if timing.event_wall_gap > 3.0 and timing.cand_time_us_median - timing.cand_event_us_median > 50:
                    self.evidence.guards.append(
                        f"event_wall_gap: the candidate's calls take {timing.event_wall_gap:.1f}x longer by the "
                        "device-synchronised clock than by CUDA events on the current stream (work on other "
                        "streams or the host); the score uses the synchronised clock")
        self.evidence.timing = timing
        if self.device.type == "cuda":
            self._physical_floor_gate(timing)
        if not stable:
            self.evidence.guards.append("timing_unstable: bucket spread stayed above the limit")
        return self._result(Verdict.OK, conservative_round(stats.score), "")

    def _physical_floor_gate(self, timing: TimingEvidence) -> None:
        """HACK_DETECTED when the median candidate call beats writing its outputs (GPU only)."""
        dram = self.dram
        check = physical_floor(self.floor_output_bytes, self.l2_bytes, dram.bytes_per_s if dram else None,
                               timing.cand_time_us_median, timing.ref_time_us_median, dram.note if dram else "")
        self.evidence.physical_floor = {**check.to_dict(), **(dram.to_dict() if dram else {})}
        if check.violated:
            self.evidence.guards.append(check.reason[len("guard "):])
            raise Verdicted(Verdict.HACK_DETECTED, check.reason)

    def _audit(self, plan: RoundPlan, in_correctness: bool) -> Comparison:
        """Check one round's candidate output and inputs; raise Verdicted, or return the comparison."""
        outs = [self.out_arena.view(s) for s in plan.out_slots]
        got: Any = tuple(outs) if self.tuple_out else outs[0]
        c = compare_outputs(got, plan.expected, self.config.tolerance)
        if not c.ok:
            if in_correctness:
                raise Verdicted(Verdict.INCORRECT, f"correctness input {plan.r + 1} of "
                                f"{self.config.num_correctness_inputs}: {c.reason}")
            raise Verdicted(Verdict.HACK_DETECTED, f"guard timed_output_audit: a timed call's output was wrong "
                            f"after all correctness inputs passed (round {plan.r}): {c.reason}")
        if not self.ref_mutates_inputs:
            for v, slot in zip(plan.inputs, plan.cand_slots, strict=True):
                if slot is not None and not torch.equal(self.in_arena.view(slot), v):
                    raise Verdicted(Verdict.INCORRECT, f"the candidate modified its input in place (round {plan.r})")
        return c

    # --- plumbing --------------------------------------------------------------------
    def _recv(self, worker: WorkerHandle, timeout: float, what: str) -> dict[str, Any]:
        try:
            return wire.recv_json(worker.conn, timeout)
        except TimeoutError:
            sandbox.kill_group(worker.proc)
            raise Verdicted(Verdict.TIMEOUT, f"the candidate did not finish {what} within {timeout:.1f} s") from None
        except wire.PeerClosed:
            desc = worker.exit_description()
            tail = worker.stderr_tail()
            verdict = Verdict.CUDA_FAULT if "CUDA" in tail and self.device.type == "cuda" else Verdict.RUNTIME_ERROR
            raise Verdicted(verdict, f"{desc} while {what}" + (f"\n{tail}" if tail else "")) from None
        except wire.ProtocolError as err:
            raise Verdicted(Verdict.HACK_DETECTED, f"guard worker_protocol: {err}") from None

    def _raise_worker_error(self, msg: dict[str, Any], worker: WorkerHandle, in_correctness: bool = True) -> None:
        kind = msg.get("kind")
        detail = str(msg.get("detail", ""))[-8000:]
        mapping = {
            "compile": Verdict.COMPILE_ERROR, "load": Verdict.LOAD_ERROR, "runtime": Verdict.RUNTIME_ERROR,
            "cuda_fault": Verdict.CUDA_FAULT, "structure": Verdict.INCORRECT,
        }
        if kind in mapping:
            raise Verdicted(mapping[kind], detail)
        if kind == "global_state":
            raise Verdicted(Verdict.HACK_DETECTED, f"guard global_state: {detail}")
        if kind == "persistent_output":
            raise Verdicted(Verdict.HACK_DETECTED, f"guard persistent_output: {detail}")
        if kind == "reference":
            raise Verdicted(Verdict.HACK_DETECTED, "guard reference_integrity: the reference failed in the "
                            f"candidate's process but not in the judge's: {detail}")
        if kind == "infra":
            raise Verdicted(Verdict.INFRA_ERROR, detail)
        raise Verdicted(Verdict.HACK_DETECTED, f"guard worker_protocol: unexpected message {str(msg)[:200]}")

    def _result(self, verdict: Verdict, speedup: float | None, detail: str) -> ScoreResult:
        self.evidence.phases_s.update(self.phases)
        self.evidence.clocks = _clocks(self.device)
        return ScoreResult(verdict=verdict, speedup=speedup if verdict is Verdict.OK else None,
                           detail=detail, evidence=self.evidence, task=self.task.name)


def _int(d: Any, key: str) -> int:
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, int) or isinstance(v, bool):
        raise Verdicted(Verdict.HACK_DETECTED, f"guard worker_protocol: field {key!r} missing or not an integer")
    return v


def main() -> None:
    logging.basicConfig(level=os.environ.get("EVALFARM_LOG_LEVEL", "WARNING"))
    from multiprocessing.connection import Connection

    conn = Connection(int(sys.argv[1]))
    request = wire.recv_json(conn, 60)
    try:
        judge = Judge(request, lambda pgid: wire.send_json(conn, {"op": "worker", "pgid": pgid}))
        result = judge.run()
    except Exception:  # noqa: BLE001 - the judge's own failure is the farm's fault
        result = ScoreResult.failure(Verdict.INFRA_ERROR, "judge failed:\n" + traceback.format_exc()[-4000:])
    wire.send_json(conn, {"op": "result", "result": result.to_dict()})
    conn.close()


if __name__ == "__main__":
    main()
