"""The staging area: how a timed block's inputs reach a worker only when its call may start.

In a timed block (evalfarm.judge.timed_blocks) a worker queues all of its calls at once, each behind
a gate, and the judge opens the gates one at a time. The judge writes a call's inputs into the
worker's staging area right before it opens that call's gate, and only once the call before it has
finished: later calls' inputs do not exist anywhere the candidate's process can reach while an
earlier call runs, so no call can start on them early.

The area is a memfd shared by the judge and one worker (evalfarm.judge.memfd), sealed at its size.
Its first page holds three 32-bit sequence numbers, each on a cache line of its own:

* ``GO``, written by the judge: calls up to this number may start;
* ``DONE``, written after each call (by the worker's stream on a GPU, by the worker on a CPU): calls
  up to this number have finished and their outputs are copied out;
* ``QUEUED``, written by the worker's host thread: calls up to this number are queued (on a GPU,
  every kernel of the call is on the stream behind its gate).

Then one round's inputs, at ``StagingLayout.slots``. Sequence numbers only grow over an
evaluation, so nothing is ever reset between blocks.

On a GPU the gate and the ``DONE`` write are stream memory operations on the page, mapped for the
device (the CUDA driver's ``cuStreamWaitValue32`` and ``cuStreamWriteValue32``, available by default
on every platform since CUDA 11.7), and the inputs are copied to the device by the same stream
right after the gate: once a call's gate opens the device runs all of it with no host in between,
which is what makes a queued call's time the device's own. On a CPU the worker's thread waits at
the gate itself.

Everything on the page is in the candidate's process too, so it can write any of the words: a
``GO`` written early starts a call on the previous call's inputs (wrong outputs, which the audits
catch), a ``DONE`` written early makes the judge write the next inputs sooner. What the judge's own
clock sees of each call and of the whole block is compared with what the worker reports
(evalfarm.judge.timed_blocks), so a forged word can make the judge's job harder but not pay.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import threading
import time
from typing import Any

import numpy as np
import torch

from evalfarm.judge.arena import ALIGN, Slot, aligned, dtype_name

HEADER_BYTES = 4096
GO, DONE, QUEUED = 0, 16, 32  # int32 word indexes: 64 bytes apart
_WORD_BYTES = 4


@dataclasses.dataclass(frozen=True)
class StagingLayout:
    """Where one round's tensor inputs sit in the staging area (None for a non-tensor input)."""

    slots: tuple[Slot | None, ...]
    nbytes: int  # the whole area: the header page and the inputs

    @classmethod
    def for_inputs(cls, inputs: list[Any]) -> StagingLayout:
        top = HEADER_BYTES
        slots: list[Slot | None] = []
        for v in inputs:
            if isinstance(v, torch.Tensor):
                slot = Slot(top, tuple(v.shape), dtype_name(v.dtype))
                slots.append(slot)
                top += aligned(max(slot.nbytes, 1))
            else:
                slots.append(None)
        return cls(tuple(slots), max(top, HEADER_BYTES + ALIGN))

    def to_wire(self) -> list[Any]:
        return [[s.to_wire() if s is not None else None for s in self.slots], self.nbytes]

    @classmethod
    def from_wire(cls, w: list[Any]) -> StagingLayout:
        return cls(tuple(Slot.from_wire(s) if s is not None else None for s in w[0]), int(w[1]))


def _words(buffer: torch.Tensor) -> np.ndarray:
    """The header's int32 words of a staging buffer (a CPU uint8 tensor), as a numpy view: one
    element read or written is one aligned 4-byte access."""
    return buffer[:HEADER_BYTES].numpy().view(np.int32)


def _view(buffer: torch.Tensor, slot: Slot) -> torch.Tensor:
    from evalfarm.judge.arena import DTYPES

    return buffer[slot.offset: slot.offset + slot.nbytes].view(DTYPES[slot.dtype]).view(slot.shape)


class JudgeStaging:
    """The judge's side: write a call's inputs, open its gate, read how far the worker got."""

    def __init__(self, buffer: torch.Tensor) -> None:
        self.buffer = buffer
        self.words = _words(buffer)
        self._fence = threading.Lock()

    def write_inputs(self, layout: StagingLayout, inputs: list[Any]) -> None:
        """A round's tensor inputs (host tensors of the layout's shapes) into the area."""
        for v, slot in zip(inputs, layout.slots, strict=True):
            if slot is not None:
                _view(self.buffer, slot).copy_(v)

    def open(self, seq: int) -> None:
        """Let calls up to ``seq`` start. The inputs written before are visible first: a locked
        instruction (the lock's) orders every store before it, non-temporal ones included, before
        the word's store on x86-64; elsewhere the lock's acquire and release are full barriers too."""
        with self._fence:
            pass
        self.words[GO] = seq

    def done(self) -> int:
        return int(self.words[DONE])

    def queued(self) -> int:
        return int(self.words[QUEUED])


# How long ``wait_for`` keeps looking without sleeping (yielding the core to any runnable thread
# between looks) before it sleeps between looks. A sleeping judge sees the word up to its sleep
# (200 us asked, more with the kernel's timer slack) after it was written, at a point fixed by
# where the wait's length falls in the sleep schedule: for two windows of different lengths (a
# reference and a candidate call) the two lateness values differ by up to that much, and their
# median difference did not cancel (honest kernels were charged 66-699 us per call as exchange
# excess on an H200: docs/security.md, "On the H200, 2026-11-29, seventh session"). Within this long, a look comes
# within microseconds of the word.
LOOK_WITHOUT_SLEEP_S = 0.1


def wait_for(predicate: Any, deadline: float, poll: Any = None, spin_s: float = 50e-6,
             clock: Any = time.perf_counter, look_without_sleep_s: float = LOOK_WITHOUT_SLEEP_S,
             pause: Any = time.sleep, yield_core: Any = os.sched_yield) -> str:
    """Look at ``predicate`` until it holds ("ok"), ``deadline`` (by ``clock``) passes ("timeout"),
    or ``poll()``, called about every 100 us, returns true ("message": the worker sent one, an
    error report). Spins for ``spin_s``, then yields the core between looks (``yield_core``: any
    runnable thread goes first) until ``look_without_sleep_s`` since the start, then sleeps between
    looks (``pause``), longer and longer up to 200 us, so a long wait leaves the core to others."""
    start = clock()
    next_poll = start
    sleep = 0.0
    while True:
        if predicate():
            return "ok"
        now = clock()
        if now >= deadline:
            return "timeout"
        if poll is not None and now >= next_poll:
            if poll():  # a message; the worker may have written the word just before it
                return "ok" if predicate() else "message"
            next_poll = now + 100e-6
        waited = now - start
        if waited > look_without_sleep_s:
            sleep = min(max(sleep * 2, 10e-6), 200e-6)
            pause(sleep)
        elif waited > spin_s:
            yield_core()


class HostGate:
    """A CPU worker's side: its thread waits at the gate for the judge's "open" message (a blocking
    read wakes it within tens of microseconds, where polling the word would either burn a core the
    judge needs or wake late) and says "done" after each call; the words are written too."""

    def __init__(self, buffer: torch.Tensor, send: Any, recv: Any) -> None:
        self.buffer = buffer
        self.words = _words(buffer)
        self._send, self._recv = send, recv

    def wait(self, seq: int) -> None:
        msg = self._recv()
        if msg.get("op") != "open" or msg.get("seq") != seq:
            raise RuntimeError(f"expected the judge to open call {seq}, got {str(msg)[:80]}")

    def copy_in(self, dst: torch.Tensor, slot: Slot) -> None:
        dst.copy_(_view(self.buffer, slot))

    def finished(self, seq: int) -> None:
        self.words[DONE] = seq
        self._send({"op": "done", "seq": seq})

    def queued(self, seq: int) -> None:
        self.words[QUEUED] = seq


class GateUnavailable(RuntimeError):
    """The device cannot run stream memory operations on the staging page (the timed blocks then
    fall back to one call per exchange, and the evidence says why)."""


CU_MEMHOSTREGISTER_DEVICEMAP = 0x02
CU_STREAM_WAIT_VALUE_GEQ = 0x0
CU_STREAM_WRITE_VALUE_DEFAULT = 0x0


@functools.cache
def _driver() -> Any:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as err:
        raise GateUnavailable(f"no CUDA driver library: {err}") from None
    sigs = {
        "cuMemHostRegister_v2": [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint],
        "cuMemHostUnregister": [ctypes.c_void_p],
        "cuMemHostGetDevicePointer_v2": [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint],
        "cuStreamWaitValue32_v2": [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint],
        "cuStreamWriteValue32_v2": [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint],
        "cuMemcpyHtoDAsync_v2": [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p],
    }
    for name, argtypes in sigs.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise GateUnavailable(f"the CUDA driver has no {name}") from None
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return lib


def _check(code: int, what: str) -> None:
    if code != 0:
        raise GateUnavailable(f"{what} failed (CUDA driver error {code})")


class CudaGate:
    """A GPU worker's side: the gate, the DONE write and the input copies, all on the current
    stream. The staging page is registered with the driver (page-locked, mapped for the device)
    once, before any task or candidate code runs."""

    def __init__(self, buffer: torch.Tensor) -> None:
        self.buffer = buffer
        self.words = _words(buffer)
        self._lib = lib = _driver()
        self._host = buffer.data_ptr()
        _check(lib.cuMemHostRegister_v2(self._host, buffer.numel(), CU_MEMHOSTREGISTER_DEVICEMAP),
               "registering the staging area")
        dptr = ctypes.c_uint64()
        _check(lib.cuMemHostGetDevicePointer_v2(ctypes.byref(dptr), self._host, 0),
               "mapping the staging area for the device")
        self._dev = dptr.value

    @staticmethod
    def _stream() -> int:
        return torch.cuda.current_stream().cuda_stream

    def wait(self, seq: int) -> None:
        _check(self._lib.cuStreamWaitValue32_v2(self._stream(), self._dev + GO * _WORD_BYTES, seq,
                                                CU_STREAM_WAIT_VALUE_GEQ), "queueing a call's gate")

    def copy_in(self, dst: torch.Tensor, slot: Slot) -> None:
        if not dst.is_contiguous() or dst.numel() * dst.element_size() != slot.nbytes:
            raise ValueError(f"input slot {slot} does not match its device buffer")
        _check(self._lib.cuMemcpyHtoDAsync_v2(dst.data_ptr(), self._host + slot.offset, slot.nbytes, self._stream()),
               "queueing an input copy")

    def finished(self, seq: int) -> None:
        _check(self._lib.cuStreamWriteValue32_v2(self._stream(), self._dev + DONE * _WORD_BYTES, seq,
                                                 CU_STREAM_WRITE_VALUE_DEFAULT), "queueing a call's completion word")

    def queued(self, seq: int) -> None:
        self.words[QUEUED] = seq


def worker_gate(buffer: torch.Tensor, is_cuda: bool, send: Any = None, recv: Any = None) -> tuple[Any, str]:
    """The worker's gate over its staging buffer and a note for the evidence; (None, why) where a
    GPU cannot have one. ``send``/``recv``: the worker's messages to and from the judge (a CPU gate's)."""
    if not is_cuda:
        return HostGate(buffer, send, recv), "timed blocks: inputs staged per call, the worker waits at each call's gate"
    try:
        return CudaGate(buffer), ("timed blocks: inputs staged per call, each call queued on the stream "
                                  "behind a gate the judge opens (stream memory operations)")
    except GateUnavailable as err:
        return None, f"timed blocks unavailable: {err}"
