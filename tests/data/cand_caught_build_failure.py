"""A broken extension whose build failure the module catches, going on in PyTorch (as some
published kernels do): judged like any other code."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# No torch headers (no_implicit_headers): the compiler reaches the error at once.
SRC = "#include <Python.h>\nstatic PyObject* f(PyObject*, PyObject* x) { return x }  // missing semicolon\n"
try:
    ext = load_inline(name="evalfarm_test_caught_failure", cpp_sources=SRC, no_implicit_headers=True)
    ERROR = ""
except RuntimeError as err:
    ext = None
    ERROR = f"{type(err).__name__}: {err}"


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        # What plain Python raises: torch's RuntimeError, with the compiler's output.
        assert ERROR.startswith("RuntimeError: Error building extension 'evalfarm_test_caught_failure'"), ERROR
        assert "error" in ERROR.split(":", 2)[2], ERROR
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale + self.bias
