"""The module catches its extension's build failure and keeps it; ModelNew raises it again. The
build pool sees the module catch it (no verdict there); the worker sees it escape: COMPILE_ERROR."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = "#include <Python.h>\nstatic PyObject* f(PyObject*, PyObject* x) { return x }  // missing semicolon\n"
try:
    ext = load_inline(name="evalfarm_test_reraised_failure", cpp_sources=SRC, no_implicit_headers=True)
    KEPT = None
except RuntimeError as err:
    KEPT = err


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        if KEPT is not None:
            raise ImportError("the fast path is not available") from KEPT
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale
