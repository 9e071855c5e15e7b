"""The candidate worker: an untrusted, fresh process per evaluation.

Started by the judge as ``python -m evalfarm.judge.worker FD``. It runs the task's Model
and the candidate's ModelNew side by side on inputs the judge placed in shared memory,
times each whole call (ended by a device-wide synchronisation), and copies the
candidate's outputs back for the judge to check. It never sees the input seed or the
judge's reference outputs, and it never gives a verdict: the judge does.

Every round looks the same from inside, whether the judge will audit its output or not.

Before torch (and any thread) starts, the worker asks for a private network namespace and
a process limit (best effort, see ``evalfarm.sandbox.isolate_process``) and reports what it
obtained in its "ready" message. After every round, outside the timed calls, it checks that
the candidate's output is freshly allocated: not the storage it returned in the previous
round (kept alive here, so the allocator cannot legitimately hand it out again) and not a
view of its own inputs unless the reference's output is one too.

No call may see another call's leftovers: free memory is poisoned before every timed call
(``evalfarm.judge.poison``), and persisting L2 lines are demoted before the L2 flush.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
import traceback
from typing import Any

# Trusted primitives, bound before any task or candidate code can rebind them.
_perf_ns = time.perf_counter_ns
_CUDA_FAULT_MARKERS = ("CUDA error", "cuda runtime error", "device-side assert", "illegal memory access",
                       "CUBLAS_STATUS", "CUDNN_STATUS", "cuDNN error", "unspecified launch failure",
                       "misaligned address", "illegal instruction")


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _error_kind(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    return "cuda_fault" if any(m in text for m in _CUDA_FAULT_MARKERS) else "runtime"


def _storage_span(t: Any) -> tuple[int, int]:
    """[start, end) of the memory block behind a tensor (its whole storage)."""
    st = t.untyped_storage()
    start = st.data_ptr()
    return start, start + st.nbytes()


def _data_span(t: Any) -> tuple[int, int]:
    """[start, end) of the bytes a contiguous tensor's elements occupy."""
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def _overlaps(a: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
    return a[1] > a[0] and any(s < a[1] and a[0] < e for s, e in spans if e > s)


def alias_problem(cand_outs: list[Any], cand_inputs: list[Any], prev_cand_storages: list[int],
                  ref_outs: list[Any], ref_inputs: list[Any], prev_ref_storages: list[int]) -> str:
    """Why the candidate's outputs are not fresh memory ("" when they are).

    A candidate output is flagged when its storage is one the candidate returned in the
    previous round, unless the reference's output persists across rounds too; or when it
    overlaps one of the candidate's inputs, unless the reference's output overlaps its own
    inputs. Empty tensors are ignored (they own no memory).
    """
    ref_spans = [_storage_span(o) for o in ref_outs if isinstance(o, Tensor) and o.numel()]
    ref_in = [_data_span(a) for a in ref_inputs if isinstance(a, Tensor)]
    ref_persists = any(s[0] in prev_ref_storages for s in ref_spans)
    ref_aliases_input = any(_overlaps(s, ref_in) for s in ref_spans)
    cand_in = [_data_span(a) for a in cand_inputs if isinstance(a, Tensor)]
    for i, o in enumerate(cand_outs):
        if not o.numel():
            continue
        span = _storage_span(o)
        if not ref_persists and span[0] in prev_cand_storages:
            return (f"output {i} is the same storage the candidate returned in the previous call "
                    "(a persistent output buffer: results can be reused or written after the call)")
        if not ref_aliases_input and _overlaps(span, cand_in):
            return f"output {i} shares memory with the candidate's inputs, while the reference's does not"
    return ""


Tensor: Any = None  # torch.Tensor, bound when torch is imported


class Worker:
    def __init__(self, fd: int, isolation: list[str] | None = None) -> None:
        from multiprocessing.connection import Connection

        from evalfarm.judge import wire

        self.wire = wire
        self.conn = Connection(fd)
        self.isolation = isolation or []
        self._prev_cand_storages: list[int] = []
        self._prev_ref_storages: list[int] = []
        self._held: list[Any] = []  # last round's outputs, kept alive so their memory is not reused
        self._poison: Any = None  # HeapPoisoner (CPU) or FreeMemoryPoisoner (CUDA); None when off
        self._reset_l2: Any = None  # evalfarm.judge.state.reset_persisting_l2 on CUDA

    def send(self, msg: dict[str, Any]) -> None:
        self.wire.send_json(self.conn, msg)

    def fail(self, kind: str, detail: str, **extra: Any) -> None:
        self.send({"op": "error", "kind": kind, "detail": detail[-8000:], **extra})
        self.conn.close()
        os._exit(0)

    def run(self) -> None:
        import torch  # before waiting: the import overlaps the judge's own set-up

        global Tensor
        Tensor = torch.Tensor
        init = self.wire.recv_pickle(self.conn)
        from evalfarm.sandbox import Limits, apply_limits

        apply_limits(Limits(**init["limits"]))

        from evalfarm.build import hook
        from evalfarm.build.cache import ExtensionCache
        from evalfarm.judge.arena import Arena, Slot
        from evalfarm.judge.poison import POISON_ENV, make_poisoner
        from evalfarm.judge.state import StateSnapshot, reset_persisting_l2, set_clean_state
        from evalfarm.tasks.format import Task, exec_module, instantiate_task

        self.torch = torch
        self.Slot = Slot
        device = torch.device(init["device"])
        self.is_cuda = device.type == "cuda"
        self._tuple_out = bool(init["tuple_out"])
        if self.is_cuda:
            torch.cuda.set_device(device)
            self._sync = torch._C._cuda_synchronize  # device-wide: waits for every stream
            self._event = torch.cuda.Event
            self._reset_l2 = reset_persisting_l2  # before every timed call
        else:
            self._sync = lambda: None
        # Bound now, before any task or candidate code runs.
        self._poison, poison_note = make_poisoner(device.type, os.environ.get(POISON_ENV, "auto"), torch)
        self.isolation.append(poison_note)
        set_clean_state(init["num_threads"])
        torch.set_grad_enabled(False)
        self.in_arena = Arena.attach(init["in_arena"])
        self.out_arena = Arena.attach(init["out_arena"])
        flush_bytes = int(init.get("flush_bytes", 0))
        self._flush_buf = torch.empty(flush_bytes, dtype=torch.uint8, device=device) if flush_bytes else None
        load_start = _perf_ns()

        task = Task(name=init["task_name"], source=init["task_source"], path=None,
                    size_profiles=init["size_profiles"])
        try:
            task_mod = instantiate_task(task, init["profile"])
            torch.manual_seed(init["weight_seed"])
            self.ref = task_mod.Model(*init["init_inputs"]).to(device)
        except BaseException:  # noqa: BLE001
            self.fail("infra", "reference Model failed to build in the worker:\n" + traceback.format_exc())

        ext_state = hook.install(ExtensionCache(init["cache_dir"]), init["arch"])
        try:
            cand_mod = exec_module(init["candidate_source"], "evalfarm_candidate", "candidate.py")
            model_new = getattr(cand_mod, "ModelNew", None)
            if model_new is None:
                raise AttributeError("the candidate module defines no ModelNew")
            torch.manual_seed(init["weight_seed"])
            self.cand = model_new(*init["init_inputs"]).to(device)
            self._sync()
        except hook.CompileError:
            self.fail("compile", ext_state.compile_error)
        except BaseException as err:  # noqa: BLE001 - a broken candidate is a verdict, not a crash
            kind = _error_kind(err)
            self.fail(kind if kind == "cuda_fault" else "load", traceback.format_exc())
        torch.set_grad_enabled(False)
        self.snapshot = StateSnapshot()
        self.send({
            "op": "ready",
            "load_s": (_perf_ns() - load_start) / 1e9,
            "isolation": self.isolation,
            "extensions": [{"name": b.name, "key": b.key, "cache_hit": b.cache_hit, "seconds": b.seconds}
                           for b in ext_state.built],
        })
        while True:
            msg = self.wire.recv_json(self.conn, None)
            if msg.get("op") == "rounds":
                self.run_rounds(msg["rounds"])
            else:
                break
        self.conn.close()
        os._exit(0)

    def _args(self, spec: list[list[Any]]) -> list[Any]:
        out = []
        for item in spec:
            if item[0] == "T":
                out.append(self.in_arena.view(self.Slot.from_wire(item[1])))
            else:
                out.append(item[1])
        return out

    def _timed(self, fn: Any, args: list[Any]) -> tuple[Any, int, float | None]:
        if self._poison is not None:  # first: the flush and the sync below come after it
            try:
                self._poison()
            except BaseException:  # noqa: BLE001 - fail closed: no unpoisoned call is ever timed
                self.fail("infra", "poisoning free memory failed:\n" + traceback.format_exc())
        if self._reset_l2 is not None:  # persisting lines become normal, so the flush evicts them
            self._reset_l2()
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
        return out, t1 - t0, ev

    def run_rounds(self, rounds: list[dict[str, Any]]) -> None:
        """Run each round and answer it at once (the judge bounds every round's wait)."""
        for rd in rounds:
            reply = self.run_round(rd)
            self.send(reply)
            if reply["op"] != "round":
                return

    def run_round(self, rd: dict[str, Any]) -> dict[str, Any]:
        r = int(rd["r"])
        timings: dict[str, Any] = {"r": r}
        cand_out = ref_out = None
        ref_args = self._args(rd["ref"])
        cand_args = self._args(rd["cand"])
        # The state check runs before the round and after it, never between the two calls, so
        # neither call pays for it (a cache-polluting check before one call biases the ratio).
        problem = self._state_problem(r)
        if problem:
            return problem
        for which in (("ref", "cand") if rd["first"] == "ref" else ("cand", "ref")):
            if which == "ref":
                try:
                    ref_out, t, ev = self._timed(self.ref, ref_args)
                except BaseException as err:  # noqa: BLE001
                    return {"op": "error", "kind": "reference", "round": r,
                            "detail": f"{type(err).__name__}: {err}"[-4000:]}
                timings["t_ref"], timings["e_ref"] = t, ev
            else:
                try:
                    cand_out, t, ev = self._timed(self.cand, cand_args)
                except BaseException as err:  # noqa: BLE001
                    return {"op": "error", "kind": _error_kind(err), "round": r,
                            "detail": traceback.format_exc()[-8000:]}
                timings["t_cand"], timings["e_cand"] = t, ev
        problem = self._state_problem(r)
        if problem:
            return problem
        slots = [self.Slot.from_wire(s) for s in rd["out"]]
        outs = list(cand_out) if isinstance(cand_out, tuple | list) else [cand_out]
        problem = self._structure_problem(outs, cand_out, slots)
        if problem:
            return {"op": "error", "kind": "structure", "round": r, "detail": problem}
        # Outside the timed calls, and the same in every round (audited or not).
        ref_outs = [o for o in (ref_out if isinstance(ref_out, tuple | list) else [ref_out])
                    if type(o) is self.torch.Tensor]
        problem = alias_problem(outs, cand_args, self._prev_cand_storages,
                                ref_outs, ref_args, self._prev_ref_storages)
        if problem:
            return {"op": "error", "kind": "persistent_output", "round": r, "detail": problem}
        self._held = [*outs, *ref_outs]
        self._prev_cand_storages = [_storage_span(o)[0] for o in outs if o.numel()]
        self._prev_ref_storages = [_storage_span(o)[0] for o in ref_outs if o.numel()]
        try:
            for o, s in zip(outs, slots, strict=True):
                self.out_arena.view(s).copy_(o)
            self._sync()
        except BaseException as err:  # noqa: BLE001
            return {"op": "error", "kind": _error_kind(err), "round": r,
                    "detail": f"reading the candidate's output failed: {type(err).__name__}: {err}"}
        return {"op": "round", **timings}

    def _state_problem(self, r: int) -> dict[str, Any] | None:
        changed = self.snapshot.changes()
        if not changed:
            return None
        return {"op": "error", "kind": "global_state", "round": r,
                "detail": "global state changed around a reference call: " + "; ".join(changed[:10])}

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
    # First, while this process has a single thread (namespaces are per thread).
    from evalfarm.sandbox import isolate_process

    isolation = isolate_process(network=os.environ.get("EVALFARM_WORKER_NETNS", "1") != "0")
    worker = Worker(fd, isolation)
    worker.run()


if __name__ == "__main__":
    main()
