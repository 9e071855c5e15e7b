"""Shared memory between the judge and the worker: inputs go in, candidate outputs come back.

One flat byte buffer per direction, allocated by the judge, mapped once by the worker
(an anonymous memfd on CPU, a CUDA IPC handle on GPU). A *slot* is a typed, contiguous view at
an aligned offset; per-call messages carry only slot descriptions, so 1000 inputs cost no
host-to-device copies and no per-tensor IPC.

On CPU an arena has no name anywhere: it is a ``memfd_create`` file the judge creates before it
starts the worker, passed to that worker alone as an inherited file descriptor (``pass_fds``).
The judge sizes it later and seals its size (``F_SEAL_SHRINK | F_SEAL_GROW``), so the worker can
neither truncate it under the judge's mapping nor grow it; the worker maps it and closes its
descriptor before any task or candidate code runs. No other evaluation's process can find it in
``/dev/shm`` or in its own ``/proc/self/fd``, and it is freed when the last process mapping it ends.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
from typing import Any

import torch

from evalfarm.judge.memfd import new_arena_fd

ALIGN = 256

DTYPES: dict[str, torch.dtype] = {
    str(d): d
    for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)
}


def dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype)
    if name not in DTYPES:
        raise TypeError(f"unsupported tensor dtype {dtype}")
    return name


@dataclasses.dataclass(frozen=True)
class Slot:
    offset: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * DTYPES[self.dtype].itemsize

    def to_wire(self) -> list[Any]:
        return [self.offset, list(self.shape), self.dtype]

    @classmethod
    def from_wire(cls, w: list[Any]) -> Slot:
        return cls(int(w[0]), tuple(int(s) for s in w[1]), str(w[2]))


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def _map(fd: int, nbytes: int) -> torch.Tensor:
    """A shared mapping of a memfd that keeps no descriptor open (torch closes the one it opens;
    Python's mmap would keep a duplicate for as long as the mapping lives)."""
    return torch.from_file(f"/proc/self/fd/{fd}", shared=True, size=nbytes, dtype=torch.uint8)


class Arena:
    """A byte buffer carved into slots by a bump allocator that the judge resets per batch."""

    def __init__(self, buffer: torch.Tensor, fd: int | None = None, pool: Any = None, owns_fd: bool = False) -> None:
        self.buffer = buffer
        self._pool = pool  # the private CUDA memory pool that owns the buffer, kept alive with it
        self.fd = fd  # the memfd's number (CPU), as the worker inherited it; open here only if owned
        self._owns_fd = owns_fd
        self.capacity = buffer.numel()
        self._top = 0

    @classmethod
    def allocate(cls, nbytes: int, device: str, fd: int | None = None) -> Arena:
        """An arena of at least ``nbytes``. On CPU it lives in the memfd ``fd`` (from ``new_arena_fd``,
        already inherited by the worker that will map it), which is sized, sealed, mapped and then
        closed here: the judge keeps only the mapping, so no descriptor of it stays open in the judge
        for another process to reopen through ``/proc``. With ``fd`` None a fresh memfd is made and
        kept open (``close`` closes it)."""
        nbytes = max(aligned(nbytes), ALIGN)
        if device == "cpu":
            owns = fd is None
            if fd is None:
                fd = new_arena_fd()
            os.ftruncate(fd, nbytes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            buf = _map(fd, nbytes)
            if not owns:
                os.close(fd)
            return cls(buf, fd, owns_fd=owns)
        buf, _, pool = _private_cuda_buffer(nbytes, device)
        return cls(buf, pool=pool)

    def handle(self) -> dict[str, Any]:
        """What the worker needs to map this arena (pickled; trusted direction). On CPU the worker
        must have inherited ``fd`` (the same number in both processes, as ``pass_fds`` keeps it)."""
        if self.fd is not None:
            return {"kind": "memfd", "fd": self.fd, "nbytes": self.capacity}
        from torch.multiprocessing.reductions import reduce_tensor

        return {"kind": "cuda", "reduced": reduce_tensor(self.buffer), "nbytes": self.capacity,
                "device_index": self.buffer.device.index}

    @classmethod
    def attach(cls, handle: dict[str, Any], device: Any = None) -> Arena:
        """Map an arena in the worker. A memfd's descriptor is closed once mapped: the mapping is all
        the worker keeps, so its code cannot resize (sealed anyway) or hand on the file. A CUDA
        arena opens on ``device``, the worker's own index of the GPU: a worker sees its one GPU as
        cuda:0 while the judge may know it as cuda:1 (see ``cuda_handle_for``)."""
        if handle["kind"] == "memfd":
            fd, nbytes = int(handle["fd"]), int(handle["nbytes"])
            if os.fstat(fd).st_size != nbytes:
                raise RuntimeError(f"arena descriptor {fd} holds {os.fstat(fd).st_size} bytes, expected {nbytes}")
            buf = _map(fd, nbytes)
            os.close(fd)
            return cls(buf)
        rebuild, args = cuda_handle_for(handle, device)
        return cls(rebuild(*args))

    def reset(self, start: int = 0) -> None:
        """The next slot at ``start`` (0, or where a second half of the arena begins)."""
        if start < 0 or start % ALIGN or start > self.capacity:
            raise ValueError(f"arena reset to {start}: not an aligned offset within {self.capacity} bytes")
        self._top = start

    def skip(self, nbytes: int) -> None:
        """Leave ``nbytes`` (aligned) unused before the next slot."""
        end = self._top + aligned(max(nbytes, 0))
        if end > self.capacity:
            raise MemoryError(f"arena full ({self.capacity} bytes)")
        self._top = end

    def alloc(self, shape: tuple[int, ...], dtype: torch.dtype) -> Slot:
        slot = Slot(self._top, tuple(shape), dtype_name(dtype))
        end = self._top + aligned(max(slot.nbytes, 1))
        if end > self.capacity:
            raise MemoryError(f"arena full ({self.capacity} bytes)")
        self._top = end
        return slot

    def strided_view(self, slot: Slot, strides: Any) -> torch.Tensor:
        """The slot read with ``strides`` (an output copied in its own dense layout), or its plain
        view for None. Strides that are not a dense permutation of the slot's shape are refused
        (they come from the worker's report): ValueError."""
        view = self.view(slot)
        if strides is None:
            return view
        if not dense_permutation(slot.shape, strides):
            raise ValueError(f"strides {strides!r} are not a dense layout of shape {slot.shape}")
        return view.as_strided(slot.shape, tuple(int(x) for x in strides))

    def view(self, slot: Slot) -> torch.Tensor:
        if slot.offset < 0 or slot.offset % ALIGN or slot.offset + slot.nbytes > self.capacity:
            raise ValueError(f"slot {slot} outside the arena")
        raw = self.buffer[slot.offset: slot.offset + slot.nbytes]
        return raw.view(DTYPES[slot.dtype]).view(slot.shape)

    def close(self) -> None:
        """Close the memfd if this arena created it (the mapping goes with the last reference)."""
        if self._owns_fd and self.fd is not None:
            os.close(self.fd)
            self.fd = None
            self._owns_fd = False


# Where torch.multiprocessing.reductions.reduce_tensor puts the storage's device index among
# rebuild_cuda_tensor's arguments (type, size, stride, offset, storage type, dtype, device, ...).
_REBUILD_DEVICE_ARG = 6


def cuda_handle_for(handle: dict[str, Any], device: Any) -> tuple[Any, tuple[Any, ...]]:
    """A CUDA arena's (rebuild, args) with the GPU renumbered to ``device`` (an index, a
    ``torch.device`` or None for as-is). The judge exports the arena under its own numbering of
    the host's GPUs; the worker sees only its GPU, as cuda:0, so rebuilding with the judge's index
    fails on every GPU but the first ("invalid device ordinal"). ValueError when torch's argument
    layout is not the one this expects (a torch upgrade), rather than opening the wrong device."""
    rebuild, args = handle["reduced"]
    index = getattr(device, "index", device)
    if index is None or "device_index" not in handle:
        return rebuild, tuple(args)
    args = list(args)
    if len(args) <= _REBUILD_DEVICE_ARG or args[_REBUILD_DEVICE_ARG] != handle["device_index"]:
        raise ValueError(f"this torch's CUDA IPC handle has no device index at argument {_REBUILD_DEVICE_ARG} "
                         f"(expected {handle['device_index']!r}): the arena cannot be renumbered for the worker")
    args[_REBUILD_DEVICE_ARG] = int(index)
    return rebuild, tuple(args)


def _private_cuda_buffer(nbytes: int, device: str) -> tuple[torch.Tensor, None, Any]:
    """A device buffer alone in its allocation.

    The worker maps an arena through CUDA IPC, which opens the whole cudaMalloc segment the
    buffer lives in, not just the buffer. Allocated from torch's caching allocator, the arena
    could share a segment with the judge's own tensors (its reference outputs among them) and
    native code in the worker could read those. A private memory pool gives the arena
    segments that nothing else is ever allocated from.
    """
    mem_pool = getattr(torch.cuda, "MemPool", None)
    use_pool = getattr(torch.cuda, "use_mem_pool", None)
    if mem_pool is None or use_pool is None:
        raise RuntimeError(f"torch {torch.__version__} has no torch.cuda.MemPool: cannot give the "
                           "arena a segment of its own (torch >= 2.6 is needed on GPU hosts)")
    pool = mem_pool()
    with use_pool(pool, device=device):
        buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return buf, None, pool



def dense_permutation(shape: tuple[int, ...], strides: Any) -> bool:
    """Whether ``strides`` lay out ``shape`` densely and without overlap in some order of its
    dimensions (row-major, column-major, channels-last ...): its elements fill exactly
    ``numel`` consecutive places, so a copy between two tensors of this layout is a plain copy
    of one block."""
    if not isinstance(strides, list | tuple) or len(strides) != len(shape):
        return False
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in strides):
        return False
    expected = 1
    for size, stride in sorted(((n, st) for n, st in zip(shape, strides, strict=True) if n != 1),
                               key=lambda d: (d[1], d[0])):
        if stride != expected:
            return False
        expected *= size
    return True


def dense_strides(t: torch.Tensor) -> list[int] | None:
    """``t``'s strides when it is dense in a layout other than row-major (None when row-major,
    or when it is not dense: then it is copied element by element into a row-major slot)."""
    if t.is_contiguous():
        return None
    strides = list(t.stride())
    return strides if dense_permutation(tuple(t.shape), strides) else None
