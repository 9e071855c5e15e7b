"""Three load_inline calls: one that builds, one that fails (caught), and the failed one's source
corrected and built again in the except block. The build pool builds the third too (discover runs
again with the failure raised); the worker compiles none of them."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

MODULE = """
#include <Python.h>
static PyObject* same(PyObject*, PyObject* x) { %s }
static PyMethodDef methods[] = {{"same", same, METH_O, ""}, {nullptr, nullptr, 0, nullptr}};
#define STR2(n) #n
#define STR(n) STR2(n)
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, STR(TORCH_EXTENSION_NAME), nullptr, -1, methods};
#define INIT2(n) PyInit_##n
#define INIT(n) INIT2(n)
PyMODINIT_FUNC INIT(TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&def); }
"""
GOOD = MODULE % "Py_INCREF(x); return x;"
BROKEN = MODULE % "Py_INCREF(x) return x;"  # missing semicolon

first = load_inline(name="evalfarm_test_retry_first", cpp_sources=GOOD, no_implicit_headers=True)
try:
    second = load_inline(name="evalfarm_test_retry_broken", cpp_sources=BROKEN, no_implicit_headers=True)
except RuntimeError:
    second = load_inline(name="evalfarm_test_retry_fixed", cpp_sources=BROKEN.replace(") return", "); return"),
                         no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return second.same(first.same(torch.relu(x) * self.scale + self.bias))
