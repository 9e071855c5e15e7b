"""Shared memory between the judge and the worker: inputs go in, candidate outputs come back.

One flat byte buffer per direction, allocated by the judge, mapped once by the worker
(a shared file on CPU, a CUDA IPC handle on GPU). A *slot* is a typed, contiguous view at
an aligned offset; per-call messages carry only slot descriptions, so 1000 inputs cost no
host-to-device copies and no per-tensor IPC.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Any

import torch

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


class Arena:
    """A byte buffer carved into slots by a bump allocator that the judge resets per batch."""

    def __init__(self, buffer: torch.Tensor, path: str | None = None, pool: Any = None) -> None:
        self.buffer = buffer
        self._pool = pool  # the private CUDA memory pool that owns the buffer, kept alive with it
        self.path = path
        self.capacity = buffer.numel()
        self._top = 0

    @classmethod
    def allocate(cls, nbytes: int, device: str, shm_dir: str) -> Arena:
        nbytes = max(aligned(nbytes), ALIGN)
        if device == "cpu":
            path = os.path.join(shm_dir, f"evalfarm-arena-{uuid.uuid4().hex}")
            with open(path, "wb") as f:
                f.truncate(nbytes)
            buf = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
            return cls(buf, path)
        return cls(*_private_cuda_buffer(nbytes, device))

    def handle(self) -> dict[str, Any]:
        """What the worker needs to map this arena (pickled; trusted direction)."""
        if self.path is not None:
            return {"kind": "file", "path": self.path, "nbytes": self.capacity}
        from torch.multiprocessing.reductions import reduce_tensor

        return {"kind": "cuda", "reduced": reduce_tensor(self.buffer), "nbytes": self.capacity}

    @classmethod
    def attach(cls, handle: dict[str, Any]) -> Arena:
        if handle["kind"] == "file":
            buf = torch.from_file(handle["path"], shared=True, size=handle["nbytes"], dtype=torch.uint8)
            return cls(buf, handle["path"])
        rebuild, args = handle["reduced"]
        return cls(rebuild(*args))

    def reset(self) -> None:
        self._top = 0

    def alloc(self, shape: tuple[int, ...], dtype: torch.dtype) -> Slot:
        slot = Slot(self._top, tuple(shape), dtype_name(dtype))
        end = self._top + aligned(max(slot.nbytes, 1))
        if end > self.capacity:
            raise MemoryError(f"arena full ({self.capacity} bytes)")
        self._top = end
        return slot

    def view(self, slot: Slot) -> torch.Tensor:
        if slot.offset < 0 or slot.offset % ALIGN or slot.offset + slot.nbytes > self.capacity:
            raise ValueError(f"slot {slot} outside the arena")
        raw = self.buffer[slot.offset: slot.offset + slot.nbytes]
        return raw.view(DTYPES[slot.dtype]).view(slot.shape)

    def close(self) -> None:
        if self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


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


def shm_dir(fallback: str) -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else fallback
