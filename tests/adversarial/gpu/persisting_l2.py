import ctypes

import torch
import torch.nn as nn

WHEN = "forward"  # the test also runs it with "init"
CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # cuda.h CUlimit; cudaLimitPersistingL2CacheSize is the same
SET_ASIDE_BYTES = 8 << 20


def set_aside(nbytes):
    """Reserve persisting L2 through the driver API, as a candidate could from Python or C++.

    With the set-aside, an access-policy window (cuStreamSetAttribute or a kernel launch
    attribute) marked persisting keeps its lines in L2 through the judge's flush between timed
    calls. The window alone does nothing without the set-aside, so that is what is attempted here.
    """
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuCtxSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
    lib.cuCtxSetLimit.restype = ctypes.c_int
    rc = lib.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, nbytes)
    if rc != 0:
        raise RuntimeError(f"cuCtxSetLimit failed: CUresult {rc}")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        if WHEN == "init":
            torch.cuda.synchronize()  # the device's context is current
            set_aside(SET_ASIDE_BYTES)

    def forward(self, x):
        if WHEN == "forward":
            set_aside(SET_ASIDE_BYTES)
        return torch.relu(x)
