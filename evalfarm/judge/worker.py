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
(``HeapPoisoner`` on CPU, ``FreeMemoryPoisoner`` on CUDA), so a candidate whose fresh
``torch.empty`` lands on the block the reference just freed (holding, say, the reference's
``x @ w`` for the same input values) finds the poison pattern there, not a result it could
finish cheaply.
"""

from __future__ import annotations

import ctypes
import os
import re
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


# Free memory is filled with this byte before every timed call: every floating-point element
# then reads as NaN (all exponent bits set, non-zero mantissa), every integer as -1.
POISON_BYTE = 0xFF
# The operator's switch: "1" poisons on every device, "0" on none; unset (or "auto") poisons on
# CUDA only. On CPU the poisoning costs each call 15-25 us of cold caches, which compresses
# the speedups of tasks whose calls take tens of microseconds (docs/security.md). What applied
# is recorded in the evidence either way.
POISON_ENV = "EVALFARM_WORKER_POISON"

_MI_CHUNKS = re.compile(rb'<(?:size|unsorted) from="(\d+)" to="(\d+)" total="(\d+)" count="(\d+)"/>')
_MI_REST = re.compile(rb'<total type="rest" count="\d+" size="(\d+)"/>')
_MI_SYSTEM = re.compile(rb'<system type="current" size="(\d+)"/>')
_MI_SECOND_HEAP = re.compile(rb'<heap nr="1">')


class HeapPoisoner:
    """Fills the free memory of glibc's main heap with ``POISON_BYTE`` (CPU workers).

    Torch's CPU tensors come from ``posix_memalign`` on the worker's thread, so from glibc's
    main arena; a temporary the reference frees stays there, contents intact, until the next
    allocation of that size gets it. glibc has no call that walks its free lists, so this takes
    the free memory back the way any caller would: it reads the sizes of the main arena's free
    chunks (and of its top chunk) from ``malloc_info``, allocates exactly those sizes, and repeats
    until nothing of 1 KiB or more is left free; then it fills everything it holds and frees it
    all again. Exact sizes mean a chunk holding old data is taken whole, never split (a split
    would leave part of it free); a bin whose chunks differ in size gives up its smallest and
    largest per pass, the rest in later passes.

    Only glibc's public interface is used, and only memory this code allocated itself is
    written: nothing in use can be touched, and a drain that does not finish is an error, not a
    silent gap. The pass itself allocates nothing on the heap (the ``malloc_info`` report goes
    to a fixed buffer through one stream opened here, held pointers to a fixed array), so the
    drain converges; pages the heap grows by meanwhile are fresh from the kernel.

    The cost is outside the timed calls: a few ``malloc_info`` passes (about 25 us each) and a
    ``memset`` of the free heap, which after a call is mostly what the calls freed (5-25 MiB,
    0.3-1.7 ms, on the built-in tasks' small CPU profiles). What the timed calls feel is colder
    caches, the same for both sides: 15-25 us more per call, which matters only to calls of tens
    of microseconds (hence off by default on CPU, see ``POISON_ENV``). Best effort below 1 KiB: glibc's per-thread cache holds up to 7
    chunks of each size up to 1 KiB where ``malloc_info`` does not see them, and a small request
    may be served from there instead of the listed chunk (glibc 2.36's ``posix_memalign``, which
    allocates torch's CPU tensors, never takes from that cache; newer versions can). Not covered:
    the heaps of other threads. Memory served by mmap needs nothing: it is fresh zero pages.
    """

    MAX_PASSES = 24
    MAX_CHUNKS = 1 << 15
    SMALL = 1024  # free chunks below this (the stream's own bookkeeping) do not hold up the drain

    def __init__(self) -> None:
        libc = ctypes.CDLL("libc.so.6")
        vp, size_t = ctypes.c_void_p, ctypes.c_size_t

        def bind(name: str, restype: Any, *argtypes: Any) -> Any:
            f = getattr(libc, name)
            f.restype, f.argtypes = restype, list(argtypes)
            return f

        self._malloc = bind("malloc", vp, size_t)
        self._calloc = bind("calloc", vp, size_t, size_t)
        self._free = bind("free", None, vp)
        self._memset = bind("memset", vp, vp, ctypes.c_int, size_t)
        self._usable = bind("malloc_usable_size", size_t, vp)
        self._malloc_info = bind("malloc_info", ctypes.c_int, ctypes.c_int, vp)
        self._fseek = bind("fseek", ctypes.c_int, vp, ctypes.c_long, ctypes.c_int)
        self._ftell = bind("ftell", ctypes.c_long, vp)
        self._report = ctypes.create_string_buffer(1 << 20)
        self._fp = bind("fmemopen", vp, vp, size_t, ctypes.c_char_p)(
            ctypes.addressof(self._report), len(self._report), b"w")
        if not self._fp:
            raise OSError("fmemopen failed")
        bind("setvbuf", ctypes.c_int, vp, vp, ctypes.c_int, size_t)(self._fp, None, 2, 0)  # _IONBF
        self._held = (ctypes.c_void_p * self.MAX_CHUNKS)()
        self._n = 0
        self()  # the report's format is understood and the heap drains, or this raises now

    def _free_chunks(self) -> tuple[list[tuple[int, int, int]], int, int]:
        """The main arena's free chunks as (smallest, largest, count) per bin, its top chunk's
        size, and the memory it has from the system."""
        self._fseek(self._fp, 0, 0)
        if self._malloc_info(0, self._fp) != 0:
            raise OSError("malloc_info failed")
        report = memoryview(self._report)[: self._ftell(self._fp)]
        if not report[:40].tobytes().startswith(b'<malloc version="1">'):
            raise RuntimeError("malloc_info: unknown report format")
        second = _MI_SECOND_HEAP.search(report)
        main = report[: second.start()] if second else report  # heap 0 is the main arena
        rest, system = _MI_REST.search(main), _MI_SYSTEM.search(main)
        if rest is None or system is None:
            raise RuntimeError("malloc_info: no totals for the main arena")
        chunks, in_bins = [], 0
        for lo, hi, total, count in _MI_CHUNKS.findall(main):
            lo, hi, total, count = int(lo), int(hi), int(total), int(count)
            if hi % 16 == 0:  # a fastbin, reported as (size - 15, size); not in "rest"
                chunks.append((hi, hi, count))
            else:  # a bin, reported with the PREV_INUSE bit set
                chunks.append((lo & ~15, hi & ~15, count))
                in_bins += total
        return chunks, int(rest.group(1)) - in_bins, int(system.group(1))  # "rest" is bins + top

    def _drain(self) -> None:
        """Malloc every free chunk of the main arena into ``self._held[:self._n]``."""
        held = self._held
        first_system = None
        for _ in range(self.MAX_PASSES):
            chunks, top, system = self._free_chunks()
            first_system = system if first_system is None else first_system
            grown = system - first_system  # pages added at the top during this drain: fresh
            if all(hi < self.SMALL for _, hi, _ in chunks) and (top < self.SMALL or top <= grown + 64):
                return
            wants = []
            for lo, hi, count in chunks:
                wants += [lo] * count if lo == hi else [hi, lo]
            if top >= 64:  # all of top but the minimum chunk glibc keeps there
                wants.append((top - 48) & ~15)
            for size in sorted(wants, reverse=True):  # chunk size c is what malloc(c - 8) takes
                if self._n == self.MAX_CHUNKS:
                    raise RuntimeError(f"more than {self.MAX_CHUNKS} free heap chunks")
                # Small sizes through calloc, which (unlike malloc) does not answer from the
                # per-thread cache first, so it takes the listed chunk (and zeroes it: cheap here).
                take = self._calloc if size < self.SMALL else self._malloc
                held[self._n] = take(max(size - 8, 1), 1) if size < self.SMALL else take(size - 8)
                self._n += 1
        raise RuntimeError(f"the main heap did not drain in {self.MAX_PASSES} passes")

    def __call__(self) -> int:
        """Fill the main heap's free memory; returns how many bytes were filled."""
        held, filled, sizes = self._held, 0, set()
        self._n = 0
        try:
            self._drain()
            for i in range(self._n):
                if held[i]:
                    size = self._usable(held[i])
                    self._memset(held[i], POISON_BYTE, size)
                    filled += size
                    sizes.add(size + 8)
            return filled
        finally:
            for i in range(self._n):
                if held[i]:
                    self._free(held[i])
                    held[i] = None
            self._n = 0
            self._settle(sizes)

    def _settle(self, sizes: set[int]) -> None:
        """Let glibc sort the chunks just freed into its bins now, not in the next timed call.

        free() leaves chunks in the unsorted list, and the next malloc that finds no exact fit
        there sorts all of them (about 0.2 us each): with every free chunk just returned, that
        would be the next call's first allocation. A request of a large-bin size that no free
        chunk has exactly sorts them here; the chunk it takes merges back when freed.
        """
        size = 1024
        while size in sizes:
            size += 16
        p = self._malloc(size - 8)
        if p:
            self._free(p)


def free_blocks(segments: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(address, size) of every free block in a CUDA caching-allocator snapshot.

    Segments list their blocks in address order; a block in state "inactive" is cached memory
    no tensor uses and no stream still has work on ("active_pending_free" blocks wait for other
    streams and are left alone). Torch >= 2.1 gives each block its "address"; older versions do
    not, and the address is the segment's plus the sizes of the blocks before it.
    """
    out: list[tuple[int, int]] = []
    for seg in segments:
        addr = int(seg["address"])
        for block in seg["blocks"]:
            size = int(block["size"])
            start = int(block["address"]) if "address" in block else addr
            if block["state"] == "inactive" and size > 0:
                out.append((start, size))
            addr = start + size
    return out


class _DeviceBytes:
    """A range of device memory as ``__cuda_array_interface__``: torch wraps it, allocating nothing."""

    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 2}  # no "stream": torch wraps it without a sync


class FreeMemoryPoisoner:
    """Fills every free block of torch's CUDA caching allocator with ``POISON_BYTE``.

    Called before every timed call (reference and candidate, every round, the same way whether
    the round is audited or not), outside the timed region: the work is one allocator snapshot
    and one ``fill_`` per free block, bounded by the memory the process has cached, and the
    kernels finish before the timer starts (the device-wide sync in ``Worker._timed``).

    Nothing anyone still uses is touched. Tensors alive in this process (the models' parameters,
    the flush buffer, the outputs of this round and the ones held from the last round) are
    "active_allocated" blocks, and memory freed while another stream may still use it is
    "active_pending_free" until that work is done; only "inactive" blocks are filled. The
    arenas are not the allocator's memory at all in this process: they are a shared file (CPU)
    or CUDA IPC mappings of the judge's allocation, so they never appear in the snapshot.
    Nothing here allocates from the caching allocator (the fill wraps raw pointers; the
    snapshot is host memory), so the blocks stay free while they are filled; Python's cyclic
    collector, which could run a finalizer that allocates, is paused meanwhile.

    Torch's callables are bound at construction, before the candidate's module is loaded, so a
    candidate that rebinds ``torch.cuda.memory_snapshot`` or ``torch._C`` functions later does
    not switch the poisoning off.
    """

    def __init__(self, torch: Any) -> None:
        import functools
        import gc

        raw = torch._C._cuda_memorySnapshot
        # The binding's arguments changed across versions: (mempool_id, include_traces) in recent
        # releases, (mempool_id,) before that, none at first. Probe once, here.
        for args in (((0, 0, False),), (None,), ()):
            try:
                result = raw(*args)
            except Exception:  # noqa: BLE001 - the next form, then give up below
                continue
            self._raw = functools.partial(raw, *args)
            break
        else:
            raise RuntimeError("torch._C._cuda_memorySnapshot accepts none of the known argument forms")
        free_blocks(self._segments(result))  # the format is understood, or this raises now
        self._as_tensor = torch.as_tensor
        self._fill = torch.Tensor.fill_
        self._gc_enable, self._gc_disable, self._gc_isenabled = gc.enable, gc.disable, gc.isenabled
        # Once, on memory of our own: wrapping a raw pointer and filling it works on this build.
        probe = torch.zeros(4096, dtype=torch.uint8, device="cuda")
        self._fill(self._as_tensor(_DeviceBytes(probe.data_ptr(), probe.numel())), POISON_BYTE)
        if not bool(probe.eq(POISON_BYTE).all()):
            raise RuntimeError("filling a raw device pointer did not write the poison pattern")

    @staticmethod
    def _segments(result: Any) -> list[dict[str, Any]]:
        return result["segments"] if isinstance(result, dict) else result

    def __call__(self) -> int:
        """Fill every free block; returns how many bytes were filled."""
        was_enabled = self._gc_isenabled()
        self._gc_disable()
        try:
            total = 0
            for ptr, size in free_blocks(self._segments(self._raw())):
                self._fill(self._as_tensor(_DeviceBytes(ptr, size)), POISON_BYTE)
                total += size
            return total
        finally:
            if was_enabled:
                self._gc_enable()


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
        switch = os.environ.get(POISON_ENV, "auto")
        poison_on = switch == "1" or (switch != "0" and init["device"] != "cpu")
        if not poison_on:
            self.isolation.append(f"free memory not poisoned: {POISON_ENV}={switch}"
                                  + (" (off on CPU unless 1)" if switch != "0" else ""))
        elif init["device"] == "cpu":  # bound now, before any task or candidate code runs
            try:
                self._poison = HeapPoisoner()
                self.isolation.append("free memory poisoned before every call (glibc main heap)")
            except Exception as err:  # noqa: BLE001 - recorded in the evidence, not fatal
                self.isolation.append(f"free memory not poisoned: {type(err).__name__}: {err}"[:300])

        from evalfarm.build import hook
        from evalfarm.build.cache import ExtensionCache
        from evalfarm.judge.arena import Arena, Slot
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
            if poison_on:  # bound now, before any task or candidate code runs
                try:
                    self._poison = FreeMemoryPoisoner(torch)
                    self.isolation.append("free memory poisoned before every call (cuda caching allocator)")
                except Exception as err:  # noqa: BLE001 - recorded in the evidence, not fatal
                    self.isolation.append(f"free memory not poisoned: {type(err).__name__}: {err}"[:300])
        else:
            self._sync = lambda: None
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
        reset_persisting_l2()  # nothing the candidate's loading pinned in L2 outlives it (no-op on CPU)
        if self.is_cuda:
            self._reset_l2 = reset_persisting_l2  # bound here; before every timed call from now on
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
