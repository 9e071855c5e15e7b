"""A timing worker: a fresh process per evaluation that runs one model on the judge's inputs.

Started by the judge as ``python -m evalfarm.judge.worker FD``. Every evaluation has two:

* the **reference** worker builds the task's ``Model`` and nothing else. No candidate code
  ever runs in it, so nothing a candidate sets (global flags, thread counts, cuDNN/TF32
  modes, monkeypatched torch functions, forward hooks, the allocator) can change how the
  reference computes or how long it takes. It is trusted: for audited rounds it copies the
  reference's outputs back for the judge to compare against.
* the **candidate** worker builds ``ModelNew``. It is untrusted: it never sees the input seed,
  the reference's outputs or the verdict, and the judge stops its whole process group
  (SIGSTOP) whenever its own call is not under way (the reference's too, for symmetry).

Both time each whole call with the same code (persisting L2 lines demoted, the L2 flushed, a
device-wide synchronisation on each side of the call; the candidate's free memory poisoned, the
reference's too where the judge asks, judge.REFERENCE_POISON_ENV), so the protocol is the same for
both and the judge pairs their times round by round. Each call is two
steps: ``prepare`` (poison, demote, synchronise; on the reference's side on a GPU, wait until no
other work runs on the device), after which the judge writes the call's inputs, and ``go``
(flush, synchronise, call). The flush-and-synchronise before the call is the one moment the
inputs are visible untimed; its duration is reported, and the judge charges the candidate for
any excess over the reference's.

Where the judge asks for it (``prepare_ahead`` in the start-up message; judge.PREPARE_AHEAD_ENV),
a worker prepares its next call right after each reply, before the judge stops it, and says so
("prepared"): the judge then sends a lone call's round with its "go", and waits for a quiet GPU
itself before it writes a reference call's inputs (the judge's probes see another context's work
as the reference's would, evalfarm.judge.quiet). Nothing runs in between: the worker is stopped
from its "prepared" to its next "go", so its state is what it would have been with a "prepare" of
its own.

A correctness block (``prepare_block``, then ``go``) runs several rounds' calls in one exchange,
their inputs all written before it, each call prepared as above; its times are never used for
the score. Where the judge asks for one (``"warm"`` in ``prepare``), a worker first calls its
model once, untimed, on the first inputs it was given, and answers "warmed" before it prepares
(``Worker.warm_call``).

The candidate worker also checks, outside the timed calls and identically in every round, that
its outputs have exactly the expected type, shape, dtype and device, and that they are freshly
allocated: not the storage it returned in the previous round (kept alive here, so the allocator
cannot legitimately hand it out again) and not a view of its inputs, unless the reference's
outputs behave the same way (the judge says so at start).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import sys
import time
import traceback
from typing import Any

from evalfarm.judge.cuda_fault import is_cuda_fault
from evalfarm.judge.roles import CANDIDATE, KEPT_DIRS, REFERENCE, WARM_ENV
from evalfarm.sandbox.bubblewrap import INSIDE_ENV, SHM_ENV

# Trusted primitives, bound before any task or candidate code can rebind them.
_perf_ns = time.perf_counter_ns
_exit = os._exit

# A worker keeps a copy of its first inputs for warm calls (ScoreConfig.warm_call) up to this size.
WARM_INPUT_BYTES = 64 << 20


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _drop_privileges(init: dict[str, Any]) -> list[str]:
    """A root worker goes on as an unprivileged uid (evalfarm.sandbox.confine); its own directory is
    handed to it, the interpreter, the project and the extension cache stay reachable (read-only)."""
    from evalfarm.sandbox import confine

    covered = []
    if os.environ.get(SHM_ENV):  # inside bubblewrap with the host's /dev/shm: cover it first
        covered = confine.cover_host_shm(int(os.environ[SHM_ENV]))
    who = confine.target_identity()
    if who is None:
        if covered:  # bubblewrap binds the host's /dev/shm only for a worker that changes uid
            raise OSError("a worker given the host's /dev/shm must switch to an unprivileged uid")
        return ["not running as root: no uid change" if os.geteuid() else "still root: uid change turned off"]
    from evalfarm.sandbox import MAX_PROCESSES, limit_processes

    needed = confine.needed_paths() + ([str(init["cache_dir"])] if init.get("cache_dir") else [])
    # The total it may write (its directory, /dev/shm) is bounded like one file is (inside
    # bubblewrap, which mounted them already, so is /tmp).
    # An extension the worker builds for itself stays where the judge checks its symbols.
    notes = covered if os.environ.get(INSIDE_ENV) else \
        confine.private_scratch(os.getcwd(), *who, int(init["limits"]["file_size_bytes"]), keep=KEPT_DIRS)
    notes += confine.drop_privileges(*who, writable=[os.getcwd()], needed=needed)
    why = limit_processes()  # RLIMIT_NPROC binds now that the uid is not root
    return [*notes, f"process limit {MAX_PROCESSES}" if not why else f"no process limit: {why}"]


def _error_kind(err: BaseException, is_cuda: bool) -> str:
    text = f"{type(err).__name__}: {err}"
    return "cuda_fault" if is_cuda_fault(text, "cuda" if is_cuda else "cpu") else "runtime"


def storage_span(t: Any) -> tuple[int, int]:
    """[start, end) of the memory block behind a tensor (its whole storage)."""
    st = t.untyped_storage()
    start = st.data_ptr()
    return start, start + st.nbytes()


def data_span(t: Any) -> tuple[int, int]:
    """[start, end) of the bytes a contiguous tensor's elements occupy."""
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def overlaps(a: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
    return a[1] > a[0] and any(s < a[1] and a[0] < e for s, e in spans if e > s)


def alias_problem(cand_outs: list[Any], cand_inputs: list[Any], prev_cand_storages: list[int],
                  ref_persists: bool, ref_aliases_input: bool) -> str:
    """Why the candidate's outputs are not fresh memory ("" when they are).

    A candidate output is flagged when its storage is one the candidate returned in the
    previous round, unless the reference's output persists across rounds too; or when it
    overlaps one of the candidate's inputs, unless the reference's output overlaps its own
    inputs. Empty tensors are ignored (they own no memory).
    """
    import torch

    cand_in = [data_span(a) for a in cand_inputs if isinstance(a, torch.Tensor)]
    for i, o in enumerate(cand_outs):
        if not o.numel():
            continue
        span = storage_span(o)
        if not ref_persists and span[0] in prev_cand_storages:
            return (f"output {i} is the same storage the candidate returned in the previous call "
                    "(a persistent output buffer: results can be reused or written after the call)")
        if not ref_aliases_input and overlaps(span, cand_in):
            return f"output {i} shares memory with the candidate's inputs, while the reference's does not"
    return ""


class Worker:
    def __init__(self, fd: int, isolation: list[str] | None = None) -> None:
        from multiprocessing.connection import Connection

        from evalfarm.judge import framing

        self.framing = framing
        self.conn = Connection(fd)
        self.isolation = isolation or []
        self._prev_storages: list[int] = []
        self._held: list[Any] = []  # last round's outputs, kept alive so their memory is not reused
        self._released: list[Any] = []  # the round before's, freed in prepare (outside the timed exchange)
        self._poison: Any = None  # HeapPoisoner (CPU) or FreeMemoryPoisoner (CUDA); None when off
        self._reset_l2: Any = None  # evalfarm.judge.state.reset_persisting_l2 on CUDA
        self._ext_state: Any = None  # the candidate's evalfarm.build.hook.HookState

    def send(self, msg: dict[str, Any]) -> None:
        self.framing.send_json(self.conn, msg)

    def fail(self, kind: str, detail: str, **extra: Any) -> None:
        self.send({"op": "error", "kind": kind, "detail": detail[-8000:], "isolation": self.isolation, **extra})
        self.conn.close()
        _exit(0)

    def run(self) -> None:
        import torch  # before waiting: the import overlaps the judge's own set-up

        warm = os.environ.get(WARM_ENV, "")
        if warm.startswith("cuda"):
            try:  # the CUDA context, before any task or candidate is known
                torch.cuda.set_device(torch.device(warm))
                torch.empty(1, device=warm)
            except Exception as err:  # noqa: BLE001 - the set-up below reports a broken device
                self.isolation.append(f"device not warmed: {type(err).__name__}: {err}"[:300])
        self.send({"op": "started"})  # before any task or candidate: the judge may now call itself ready
        init = self.framing.recv_pickle(self.conn)
        from evalfarm.sandbox import Limits, address_space_limit, apply_limits

        limits = Limits(**init["limits"])
        if limits.memory_bytes is not None:  # beyond the libraries torch's import mapped
            total, note = address_space_limit(limits.memory_bytes)
            limits = dataclasses.replace(limits, memory_bytes=total)
            self.isolation.append(note)
        apply_limits(limits)

        from evalfarm.judge.arena import Arena, Slot, dense_strides
        from evalfarm.judge.poison import POISON_ENV, make_poisoner
        from evalfarm.judge.state import reset_persisting_l2, set_clean_state
        from evalfarm.tasks.format import Task, instantiate_task

        self.torch = torch
        self.Slot = Slot
        self.dense_strides = dense_strides
        self.role = init["role"]
        device = torch.device(init["device"])
        self.is_cuda = device.type == "cuda"
        self._tuple_out = bool(init["tuple_out"])
        self._ref_persists = bool(init.get("ref_persists", False))
        self._ref_aliases_input = bool(init.get("ref_aliases_input", False))
        if self.is_cuda:
            torch.cuda.set_device(device)
            self._sync = torch._C._cuda_synchronize  # device-wide: waits for every stream
            self._event = torch.cuda.Event
            self._reset_l2 = reset_persisting_l2  # before every timed call
        else:
            self._sync = lambda: None
        # Bound now, before any task or candidate code runs.
        if self.role == REFERENCE and init.get("poison") is False:  # judge.REFERENCE_POISON_ENV: no candidate code here
            self._poison, poison_note = None, "free memory not poisoned in the reference worker (it runs no candidate code)"
        else:
            self._poison, poison_note = make_poisoner(device.type, os.environ.get(POISON_ENV, "auto"), torch)
        self.isolation.append(poison_note)
        set_clean_state(init["num_threads"])
        torch.set_grad_enabled(False)
        self.in_arena = Arena.attach(init["in_arena"], device)
        self.out_arena = Arena.attach(init["out_arena"], device)
        # The staging area of timed blocks (evalfarm.judge.staging), registered with the driver on a
        # GPU while the set-up may still do so; None where the judge times lone calls.
        self._gate: Any = None
        if init.get("staging") is not None:
            from evalfarm.judge.staging import worker_gate

            self._gate, gate_note = worker_gate(Arena.attach(init["staging"]).buffer, self.is_cuda, self.send,
                                                lambda: self.framing.recv_json(self.conn, None))
            self.isolation.append(gate_note)
        try:
            dropped = _drop_privileges(init)  # the set-up that needs root is done
            if any(n.startswith("process limit") for n in dropped):  # the cap binds now: the earlier
                self.isolation = [n for n in self.isolation if not n.startswith("no process limit")]  # note is moot
            self.isolation += dropped
        except OSError as err:
            self.fail("infra", f"the worker could not drop its privileges: {err}")
        from evalfarm.sandbox import seccomp

        self.isolation.append(seccomp.install())  # every thread, before any task or candidate code
        # Timed calls' memory placed anew (evalfarm.judge.placement), where the judge asks for it.
        self._placement: Any = None
        if init.get("place_calls"):
            from evalfarm.judge.placement import PLACEMENT_NOTE, CallPlacement

            self._placement = CallPlacement(torch, device, int(init.get("place_seed", 0)))
            self.isolation.append(PLACEMENT_NOTE)
        flush_bytes = int(init.get("flush_bytes", 0))
        self._flush_buf = torch.empty(flush_bytes, dtype=torch.uint8, device=device) if flush_bytes else None
        self._quiet: Any = None  # evalfarm.judge.quiet.QuietProbe: the reference's, on a GPU
        # Kept after the first call where the evaluation may have warm calls (_keep_warm_inputs);
        # [] means none: no copy is made.
        self._warm_args: list[Any] | None = None if init.get("warm_calls") else []
        if self.is_cuda and self.role == REFERENCE:
            from evalfarm.judge.quiet import QuietProbe

            self._quiet = QuietProbe(torch, device, self._sync)
        load_start = _perf_ns()
        extensions: list[dict[str, Any]] = []
        if self.role == REFERENCE:
            task = Task(name=init["task_name"], source=init["task_source"], path=None,
                        size_profiles=init["size_profiles"])
            try:
                task_mod = instantiate_task(task, init["profile"])
                torch.manual_seed(init["weight_seed"])
                self.model = task_mod.Model(*init["init_inputs"]).to(device)
                self._sync()
            except BaseException:  # noqa: BLE001
                self.fail("infra", "the task's Model failed to build in the reference worker:\n"
                          + traceback.format_exc())
        else:
            extensions = self._load_candidate(init, device)
        torch.set_grad_enabled(False)
        self.send({
            "op": "ready",
            "load_s": (_perf_ns() - load_start) / 1e9,
            "isolation": self.isolation,
            "extensions": extensions,
            "gate": self._gate is not None,  # timed blocks can run here (evalfarm.judge.staging)
            "build_failures": self._build_failures(),
        })
        pending: dict[str, Any] | None = None
        prepare_ahead = bool(init.get("prepare_ahead"))  # the judge's choice (judge.PREPARE_AHEAD_ENV)
        ready = False  # prepared ahead, after the last call: a "go" may carry its round
        while True:
            msg = self.framing.recv_json(self.conn, None)
            op = msg.get("op")
            if op in ("prepare", "prepare_block"):
                pending, ready = msg, False
                if op == "prepare" and msg.get("warm"):  # answered first, on its own (the judge bounds it)
                    warmed = self.warm_call(msg.get("r"))
                    self.send(warmed)
                    if warmed["op"] != "warmed":
                        break
                # A correctness block's calls are never timed: no quiet-GPU wait before them (the
                # judge may be comparing the last block's outputs meanwhile: evalfarm.judge.audit_overlap).
                self.send(self.prepare(quiet=op == "prepare"))
            elif op == "go" and (pending is not None or (ready and "r" in msg)):
                if pending is not None:
                    reply = self.run_block(pending) if pending["op"] == "prepare_block" else self.run_call(pending)
                else:  # prepared ahead: on the reference's side the judge has waited for a quiet GPU
                    reply = self.run_call(msg)
                pending, ready = None, False
                self.send(reply)
                if reply["op"] not in ("round", "block"):
                    break
                if prepare_ahead:
                    # The next call's preparation now, after the reply (so outside the judge's clock for
                    # this call), from this process's own context, while its GPU work is still the last.
                    self.send(self.prepare(quiet=False))
                    ready = True
            elif op == "timed_block" and self._gate is not None:
                reply = self.run_timed_block(msg)
                self.send(reply)
                if reply["op"] != "block":
                    break
            elif op == "quiet" and self._quiet is not None:
                # The judge asks again after killing the candidate's process: is the GPU quiet now?
                quiet, waited = self._quiet.wait()
                self.send({"op": "quiet", "quiet": quiet, "waited_s": waited})
            elif op == "profile" and self.role == CANDIDATE:
                self.send(self.profile(msg))
            elif op == "kernels" and self.role == CANDIDATE:
                self.send(self.kernel_times(msg))
            else:
                break
        self.conn.close()
        os._exit(0)

    def _load_candidate(self, init: dict[str, Any], device: Any) -> list[dict[str, Any]]:
        """Build ModelNew with load_inline routed through the cache (evalfarm.build.hook): a call the
        build pool failed to build raises that failure (nothing is compiled here for it), which the
        candidate may catch; one that escapes is COMPILE_ERROR with the compiler's log. A refused
        source ends the evaluation at once, caught or not."""
        from evalfarm.build import hook
        from evalfarm.build.cache import ExtensionCache
        from evalfarm.tasks.format import exec_module

        torch = self.torch
        ext_state = self._ext_state = hook.install(
            ExtensionCache(init["cache_dir"]), init["arch"], expected=init.get("expected_extensions") or None,
            failed=init.get("failed_extensions") or None, on_refused=lambda why: self.fail("compile", why))
        try:
            cand_mod = exec_module(init["candidate_source"], "evalfarm_candidate", "candidate.py")
            model_new = getattr(cand_mod, "ModelNew", None)
            if model_new is None:
                raise AttributeError("the candidate module defines no ModelNew")
            torch.manual_seed(init["weight_seed"])
            self.model = model_new(*init["init_inputs"]).to(device)
            self._sync()
        except BaseException as err:  # noqa: BLE001 - a broken candidate is a verdict, not a crash
            failure = ext_state.raised_by(err)
            if failure is not None:  # a build failure it did not catch: what plain Python would end on
                self.fail("compile", failure.log)
            kind = _error_kind(err, self.is_cuda)
            self.fail(kind if kind == "cuda_fault" else "load", traceback.format_exc())
        return [{"name": b.name, "key": b.key, "cache_hit": b.cache_hit, "seconds": b.seconds,
                 **({"note": b.note} if b.note else {})} for b in ext_state.built]

    def _build_failures(self) -> list[dict[str, Any]]:
        """The build failures raised to the candidate so far (all caught, or it would not be
        loaded): the pool's (``recorded``), or of a build this process made itself (with its log)."""
        if self._ext_state is None:
            return []
        return [{"name": f.name, "key": f.key, "recorded": f.recorded, **({} if f.recorded else {"log": f.log[-4000:]})}
                for f in self._ext_state.failures]

    def _args(self, spec: list[list[Any]]) -> list[Any]:
        out = []
        for item in spec:
            if item[0] == "T":
                out.append(self.in_arena.view(self.Slot.from_wire(item[1])))
            else:
                out.append(item[1])
        return out

    def warm_call(self, r: Any) -> dict[str, Any]:
        """One untimed call of the model on the inputs this worker was given first
        (``_keep_warm_inputs``), asked for by the judge (the same for both workers) before a
        round's preparation, so before its inputs are written; its output is dropped before free
        memory is poisoned. "warmed" (``ran``: false before the first call), or the call's error
        as ``run_call`` reports one."""
        if not self._warm_args:
            return {"op": "warmed", "ran": False}
        try:
            out = self.model(*self._warm_args)
            del out
            self._sync()
        except BaseException as err:  # noqa: BLE001 - the candidate's error, reported as a call's
            return self._call_error(err, r, "in the untimed warm call (the model on the first inputs it was given, "
                                            "before this round's inputs were written):\n" + traceback.format_exc()[-8000:])
        return {"op": "warmed", "ran": True}

    def _call_error(self, err: BaseException, r: Any, detail: str) -> dict[str, Any]:
        """A call's error as the worker reports it: the reference's is the farm's ("infra"), the
        candidate's a CUDA fault or a runtime error."""
        kind = "infra" if self.role == REFERENCE else _error_kind(err, self.is_cuda)
        failure = self._ext_state.raised_by(err) if self._ext_state is not None else None
        if failure is not None:  # a build failure (a load_inline in forward) it did not catch
            kind, detail = "compile", failure.log
        return {"op": "error", "kind": kind, "round": r, "detail": detail}

    def prepare(self, quiet: bool = True) -> dict[str, Any]:
        """Everything before a timed call that need not follow the inputs: it runs before the
        judge writes them, so none of it can see them. ``quiet``: the reference's quiet-GPU wait
        too (prepared ahead, the judge waits for a quiet GPU itself before it writes the inputs)."""
        start = _perf_ns()
        self._prepare_memory()
        # How long the poisoning, the L2 reset and their sync took (the judge's round phases).
        reply: dict[str, Any] = {"op": "prepared", "poison_s": (_perf_ns() - start) / 1e9}
        if quiet and self._quiet is not None:
            quiet, waited = self._quiet.wait()
            if not quiet:
                return {"op": "busy", "waited_s": waited}
            reply["quiet_wait_s"] = waited
        return reply

    def _prepare_memory(self) -> None:
        """Free memory poisoned, persisting L2 lines demoted, the device synchronised: before every
        call, in a correctness block too."""
        self._released = []  # outputs of two calls ago: freed before the poisoning, not after a call
        if self._poison is not None:
            try:
                self._poison()
            except BaseException:  # noqa: BLE001 - fail closed: no unpoisoned call is ever timed
                self.fail("infra", "poisoning free memory failed:\n" + traceback.format_exc())
        if self._reset_l2 is not None:  # persisting lines become normal, so the flush evicts them
            self._reset_l2()
        self._sync()

    def _timed(self, fn: Any, args: list[Any], flush: bool = True) -> tuple[Any, int, float | None, int]:
        """(output, call ns, CUDA-event us, pre-call ns). Before the call, the L2 is flushed from this
        process's own context (so the call starts cold, and the GPU's switch from the judge's
        context to this one is paid here rather than inside the call); that pre-call time is
        reported too, since it is the one moment the call's inputs are visible untimed. ``flush``
        False (a correctness block's call, never a timing sample): no flush and no synchronisation
        of its own, the preparation's synchronisation just before it being the last."""
        p0 = _perf_ns()
        if flush:
            if self._flush_buf is not None:
                self._flush_buf.zero_()
            self._sync()
        if self.is_cuda:
            e0, e1 = self._event(enable_timing=True), self._event(enable_timing=True)
            e0.record()
        t0 = _perf_ns()
        out = fn(*args)
        if self.is_cuda:
            e1.record()
        self._sync()
        t1 = _perf_ns()
        ev = e0.elapsed_time(e1) * 1000.0 if self.is_cuda else None
        return out, t1 - t0, ev, t0 - p0

    def run_call(self, rd: dict[str, Any], flush: bool = True) -> dict[str, Any]:
        r = int(rd["r"])
        args = self._args(rd["in"])
        try:
            out, t, ev, pre = self._timed(self.model, args, flush)
        except BaseException as err:  # noqa: BLE001
            return self._call_error(err, r, traceback.format_exc()[-8000:])
        called = _perf_ns()
        if self._warm_args is None:
            self._keep_warm_inputs(args)
        slots = [self.Slot.from_wire(s) for s in rd.get("out") or []]
        outs = list(out) if isinstance(out, tuple | list) else [out]
        # Outside the timed call, the same work in both workers and in every round (audited or
        # not): the judge's clock sees the whole exchange, and what it sees beyond the reported
        # call must cost the same in both processes (judge.exchange_charge_ns). Only the
        # candidate's findings count.
        problem = self._structure_problem(outs, out, slots)
        if problem and self.role == CANDIDATE:
            return {"op": "error", "kind": "structure", "round": r, "detail": problem}
        problem = alias_problem(outs, args, self._prev_storages, self._ref_persists, self._ref_aliases_input)
        if problem and self.role == CANDIDATE:
            return {"op": "error", "kind": "persistent_output", "round": r, "detail": problem}
        self._released, self._held = self._held, outs  # nothing is freed here: see prepare
        self._prev_storages = [storage_span(o)[0] for o in outs if o.numel()]
        layouts = []
        try:
            # An output in a dense layout of its own (column-major, channels-last) is copied as
            # one block in that layout and its strides reported, so its copy costs what a
            # row-major one does (the judge's clock compares the two workers' leftovers).
            for o, s in zip(outs, slots, strict=False):
                strides = self.dense_strides(o)
                self.out_arena.strided_view(s, strides).copy_(o)
                layouts.append(strides)
            self._sync()
        except BaseException as err:  # noqa: BLE001
            return self._call_error(err, r, f"reading the output failed: {type(err).__name__}: {err}")
        # post: this worker's checks and output copy after the call (a diagnostic: evalfarm.judge.round_trace)
        return {"op": "round", "r": r, "t": t, "e": ev, "pre": pre, "strides": layouts, "post": _perf_ns() - called}

    def _keep_warm_inputs(self, args: list[Any]) -> None:
        """A private copy of the first inputs this worker was given, after its first call (so a
        later warm call never sees the inputs of the call it precedes): up to WARM_INPUT_BYTES of
        tensors, else none (``[]``: no warm calls in this worker)."""
        tensors = [a for a in args if isinstance(a, self.torch.Tensor)]
        if sum(a.numel() * a.element_size() for a in tensors) > WARM_INPUT_BYTES:
            self._warm_args = []
            return
        self._warm_args = [a.clone() if isinstance(a, self.torch.Tensor) else a for a in args]
        self._sync()

    def run_block(self, block: dict[str, Any]) -> dict[str, Any]:
        """A correctness block: its rounds in order, each as ``run_call`` runs one (the call, the
        structure and aliasing checks, the output copied out) but without the L2 flush before the
        call (its time is never a sample), each call after the
        first preceded by the preparation ``prepare`` made for the first (poisoning, L2 reset,
        synchronisation; no quiet-GPU wait: a block is never timed), whose
        nanoseconds each round reports as ``prep`` (0 for the first). A "called"
        message after each call but the last (the judge bounds every call, not only the block),
        then one reply for the block, or the first round's error as ``run_call`` reports it (its
        round named)."""
        results = []
        rounds = block.get("rounds") or []
        for k, rd in enumerate(rounds):
            prep = 0
            if k:
                self.send({"op": "called", "r": results[-1]["r"]})  # the judge bounds each call
                p0 = _perf_ns()
                self._prepare_memory()
                prep = _perf_ns() - p0
            # Its times are never samples: no L2 flush (a cold cache is for timing alone).
            reply = self.run_call(rd, flush=False)
            if reply["op"] != "round":
                return reply
            # prep: this call's preparation (poisoning, L2 reset, sync; a diagnostic: round_trace)
            results.append({**{key: value for key, value in reply.items() if key != "op"}, "prep": prep})
        return {"op": "block", "rounds": results}

    def run_timed_block(self, block: dict[str, Any]) -> dict[str, Any]:
        """A timed block (evalfarm.judge.timed_blocks): every call queued at once, each behind its
        gate in the staging area, which the judge opens one call at a time after writing that
        call's inputs there. Per call, on the stream: the gate, the inputs copied from the staging
        area into the round's input slots, the L2 flush, the call between two events, the output
        copied out, the call's completion word. Nothing waits for the device until every call is
        queued, so each call runs on the device right after its inputs arrive, as calls of a model
        do. The same structure, aliasing and persistence checks as a lone call, on each call's
        outputs as they are returned; outputs are kept until the block ends (so no call's storage
        is reused by a later one). On a CPU the thread itself waits at each gate and the host clock
        times the call. The reply is the block's per-call times (``pre``: gate to call start, the
        input copy and the flush; ``t``: the call), or the first failing call's error."""
        from evalfarm.judge.staging import StagingLayout

        gate = self._gate
        layout = StagingLayout.from_wire(block["layout"])
        seq0 = int(block["seq0"])
        rounds = block.get("rounds") or []
        self._prepare_memory()  # once, before the block: poisoning, L2 reset, synchronisation
        kept: list[Any] = []
        marks: list[Any] = []
        layouts: list[Any] = []
        prev = self._prev_storages
        for k, rd in enumerate(rounds, 1):
            seq, r = seq0 + k, int(rd["r"])
            args = self._args(rd["in"])
            slots = [self.Slot.from_wire(x) for x in rd.get("out") or []]
            try:
                if self.is_cuda:
                    ev = [self._event(enable_timing=True) for _ in range(3)]
                    gate.wait(seq)
                    ev[0].record()
                else:
                    gate.queued(seq)  # this thread is at the gate
                    gate.wait(seq)
                    p0 = _perf_ns()
                for v, slot in zip(args, layout.slots, strict=True):
                    if slot is not None:
                        gate.copy_in(v, slot)
                if self._flush_buf is not None:
                    self._flush_buf.zero_()
                spacer = self._placement.spacer() if self._placement is not None else None
                if self.is_cuda:
                    ev[1].record()
                else:
                    t0 = _perf_ns()
                out = self.model(*args)
                if self.is_cuda:
                    ev[2].record()
                    marks.append(ev)
                else:
                    marks.append((p0, t0, _perf_ns()))
                del spacer  # the call is queued: its blocks may be the next call's (stream order)
            except BaseException as err:  # noqa: BLE001
                return self._call_error(err, r, traceback.format_exc()[-8000:])
            outs = list(out) if isinstance(out, tuple | list) else [out]
            problem = self._structure_problem(outs, out, slots)
            if problem and self.role == CANDIDATE:
                return {"op": "error", "kind": "structure", "round": r, "detail": problem}
            problem = alias_problem(outs, args, prev, self._ref_persists, self._ref_aliases_input)
            if problem and self.role == CANDIDATE:
                return {"op": "error", "kind": "persistent_output", "round": r, "detail": problem}
            prev = [storage_span(o)[0] for o in outs if o.numel()]
            kept.append(outs)
            try:
                strides = [self.dense_strides(o) for o in outs]
                for o, s_, st in zip(outs, slots, strides, strict=False):
                    self.out_arena.strided_view(s_, st).copy_(o)
            except BaseException as err:  # noqa: BLE001
                return self._call_error(err, r, f"reading the output failed: {type(err).__name__}: {err}")
            layouts.append(strides)
            gate.finished(seq)
            if self.is_cuda:
                gate.queued(seq)  # every kernel of this call is on the stream behind its gate
        try:
            self._sync()
        except BaseException as err:  # noqa: BLE001 - a fault raised at the synchronisation
            return self._call_error(err, rounds[-1]["r"] if rounds else -1, traceback.format_exc()[-8000:])
        self._prev_storages = prev
        self._released, self._held = self._held, kept[-1] if kept else []
        results = []
        for rd, mark, strides in zip(rounds, marks, layouts, strict=True):
            if self.is_cuda:
                pre_us, call_us = mark[0].elapsed_time(mark[1]) * 1000.0, mark[1].elapsed_time(mark[2]) * 1000.0
                t, pre, ev_us = max(1, round(call_us * 1000)), max(0, round(pre_us * 1000)), call_us
            else:
                p0, t0, t1 = mark
                t, pre, ev_us = max(1, t1 - t0), t0 - p0, None
            results.append({"r": int(rd["r"]), "t": t, "e": ev_us, "pre": pre, "strides": strides})
        return {"op": "block", "rounds": results}

    def profile(self, msg: dict[str, Any]) -> dict[str, Any]:
        """One extra, untimed call under the torch profiler (evalfarm.judge.profiling), asked for
        by the judge after the verdict's rounds; the trace goes to the directory the judge names."""
        from evalfarm.judge.profiling import profile_call

        try:
            files = profile_call(self.model, self._args(msg["in"]), str(msg["dir"]), self._sync, self.is_cuda)
        except BaseException as err:  # noqa: BLE001 - a failed profile is a note, not a verdict
            return {"op": "profile_failed", "detail": f"{type(err).__name__}: {err}"[:2000]}
        return {"op": "profiled", "files": files}

    def kernel_times(self, msg: dict[str, Any]) -> dict[str, Any]:
        """One extra, untimed call under the CUDA profiler, asked for by the judge after the
        verdict's rounds: the device time of each kernel by name (evalfarm.judge.extension_facts)."""
        from evalfarm.judge.extension_facts import profile_kernels

        try:
            kernels = profile_kernels(self.model, self._args(msg["in"]), self._sync, self.is_cuda)
        except BaseException as err:  # noqa: BLE001 - a failed profile is a note, not a verdict
            return {"op": "kernels_failed", "detail": f"{type(err).__name__}: {err}"[:2000]}
        return {"op": "kernels", "kernels": kernels}

    def _structure_problem(self, outs: list[Any], raw: Any, slots: list[Any]) -> str:
        from evalfarm.judge.arena import DTYPES

        if len(outs) != len(slots) or (isinstance(raw, tuple | list) != (len(slots) > 1 or self._tuple_out)):
            return f"output has {len(outs)} tensor(s) ({type(raw).__name__}), expected {len(slots)}"
        for i, (o, s) in enumerate(zip(outs, slots, strict=True)):
            if type(o) is not self.torch.Tensor:
                return f"output {i} has type {type(o).__module__}.{type(o).__qualname__}, expected exactly torch.Tensor"
            if tuple(o.shape) != s.shape:
                return f"output {i} has shape {tuple(o.shape)}, expected {s.shape}"
            if o.dtype != DTYPES[s.dtype]:
                return f"output {i} has dtype {o.dtype}, expected {s.dtype}"
            if o.device.type != ("cuda" if self.is_cuda else "cpu"):
                return f"output {i} is on {o.device}, expected the evaluation device"
        return ""


def main() -> None:
    _die_with_parent()
    fd = int(sys.argv[1])
    # First, while this process has a single thread (namespaces are per thread). With a PID
    # namespace, the rest of main() runs in a forked process inside it (evalfarm.sandbox.confine).
    from evalfarm.sandbox import confine, isolate_process

    isolation = confine.enter_sandbox()
    isolation += isolate_process(network=False)
    worker = Worker(fd, isolation)
    worker.run()


if __name__ == "__main__":
    main()
