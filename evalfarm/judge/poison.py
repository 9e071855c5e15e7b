"""Free-memory poisoning for the candidate worker: no call may see another call's leftovers.

A candidate whose fresh ``torch.empty`` lands on the block the reference just freed (holding,
say, the reference's ``x @ w`` for the same input values) must find a poison pattern there, not
a result it could finish cheaply. ``evalfarm.judge.worker`` calls the poisoner chosen by
``make_poisoner`` before every timed call: ``HeapPoisoner`` on CPU, ``FreeMemoryPoisoner`` on CUDA.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from typing import Any

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


def make_poisoner(device_type: str, switch: str, torch: Any) -> tuple[Callable[[], int] | None, str]:
    """The poisoner for this device under the operator's switch (``POISON_ENV``), and the line
    that says what applied for the evidence. A poisoner that cannot start is recorded, not fatal."""
    if not (switch == "1" or (switch != "0" and device_type != "cpu")):
        return None, (f"free memory not poisoned: {POISON_ENV}={switch}"
                      + (" (off on CPU unless 1)" if switch != "0" else ""))
    try:
        if device_type == "cpu":
            return HeapPoisoner(), "free memory poisoned before every call (glibc main heap)"
        return FreeMemoryPoisoner(torch), "free memory poisoned before every call (cuda caching allocator)"
    except Exception as err:  # noqa: BLE001 - recorded in the evidence, not fatal
        return None, f"free memory not poisoned: {type(err).__name__}: {err}"[:300]
