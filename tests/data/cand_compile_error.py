import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# No torch headers (no_implicit_headers): the compiler reaches the error at once.
src = "#include <Python.h>\nstatic PyObject* f(PyObject*, PyObject* x) { return x }  // missing semicolon\n"
mod = load_inline(name="evalfarm_test_compile_error", cpp_sources=src, no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()

    def forward(self, x):
        return mod.f(x)
