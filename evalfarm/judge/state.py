"""The process-global settings the reference runs under, and the persisting-L2 controls.

The judge and both workers set the same clean state before any task or candidate code runs:
full-precision float32 matmuls and convolutions (no TF32), no cuDNN autotuning, a fixed
thread count. The reference runs in a worker where no candidate code ever runs, so the state
it was set to is the state it runs under; what a candidate changes in its own process is its
own business (tolerance decides precision, timing decides speed).

On CUDA, a context's persisting-L2 set-aside (``CU_LIMIT_PERSISTING_L2_CACHE_SIZE``, read
through the driver API) with an access-policy window lets data survive an L2 flush. Both
workers demote every persisting line (``reset_persisting_l2``) before the flush that precedes
each timed call, so nothing pinned by one call, or by the other process, survives into the next.
Without CUDA in use (CPU evaluations) or without ``libcuda.so.1`` none of this does anything.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

# cuda.h: typedef enum CUlimit_enum { CU_LIMIT_STACK_SIZE = 0x00, ..., CU_LIMIT_MAX_L2_FETCH_GRANULARITY
# = 0x05, CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06, ... } (the runtime's cudaLimitPersistingL2CacheSize
# has the same value).
CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
CUDA_SUCCESS = 0
PERSISTING_L2_KEY = "cuda.persisting_l2_limit"


@functools.cache
def _libcuda() -> Any:
    """The CUDA driver library (already loaded by torch on a GPU), or None."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    for name, argtypes in (("cuCtxGetLimit", [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]),
                           ("cuCtxSetLimit", [ctypes.c_int, ctypes.c_size_t]),
                           ("cuCtxResetPersistingL2Cache", [])):
        try:
            fn = getattr(lib, name)
        except AttributeError:  # a driver older than CUDA 11: no such call
            continue
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return lib


def _driver_fn(name: str) -> Any:
    if not torch.cuda.is_initialized():  # CPU evaluations: never touch the driver
        return None
    lib = _libcuda()
    return getattr(lib, name, None) if lib is not None else None


def persisting_l2_limit() -> int | None:
    """The current CUDA context's persisting-L2 set-aside in bytes; None without CUDA in use,
    without libcuda, or without a current context."""
    fn = _driver_fn("cuCtxGetLimit")
    if fn is None:
        return None
    value = ctypes.c_size_t(0)
    try:
        rc = fn(ctypes.pointer(value), CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
    except (OSError, ctypes.ArgumentError):
        return None
    return int(value.value) if rc == CUDA_SUCCESS else None


def _set_persisting_l2_limit(nbytes: int) -> bool:
    fn = _driver_fn("cuCtxSetLimit")
    if fn is None:
        return False
    try:
        return fn(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, nbytes) == CUDA_SUCCESS
    except (OSError, ctypes.ArgumentError):
        return False


def reset_persisting_l2() -> bool:
    """Demote every persisting L2 line of the current context to normal
    (``cuCtxResetPersistingL2Cache``), so nothing a candidate pinned survives the next flush.
    True when the driver did it; False (and nothing done) without CUDA in use or libcuda."""
    fn = _driver_fn("cuCtxResetPersistingL2Cache")
    if fn is None:
        return False
    try:
        return fn() == CUDA_SUCCESS
    except OSError:
        return False


def cuda_state() -> dict[str, int]:
    """The CUDA context state the guard watches; {} where it cannot be read (CPU, no libcuda)."""
    limit = persisting_l2_limit()
    return {} if limit is None else {PERSISTING_L2_KEY: limit}


def _set_clean_cuda_state() -> None:
    if not torch.cuda.is_initialized():
        return
    try:
        torch.cuda.synchronize()  # makes the device's primary context current on this thread
    except Exception:  # noqa: BLE001 - no usable device: nothing to record
        return
    if persisting_l2_limit():  # a leftover set-aside: back to the documented default, none
        _set_persisting_l2_limit(0)


def set_clean_state(num_threads: int) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.enabled = True
    torch.set_float32_matmul_precision("highest")
    torch.set_num_threads(num_threads)
    torch.set_default_dtype(torch.float32)
    # torch.use_deterministic_algorithms imports torch._inductor (and with it torch._dynamo: about
    # a second, more where triton is installed) just to set inductor's own flag; a fresh process
    # is already in the state asked for, so the call is made only when it would change something.
    if torch.are_deterministic_algorithms_enabled() or torch.is_deterministic_algorithms_warn_only_enabled():
        torch.use_deterministic_algorithms(False)
    _set_clean_cuda_state()
