import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# A Python module in C with no torch headers (no_implicit_headers): it builds in about a second,
# where one that includes torch/extension.h takes 30-40 s on a 2-core machine.
src = r"""
#include <Python.h>
static PyObject* crash(PyObject*, PyObject* x) {
  volatile float* p = nullptr;
  p[0] = 1.0f;  // segfault
  Py_INCREF(x);
  return x;
}
static PyMethodDef methods[] = {{"crash", crash, METH_O, ""}, {nullptr, nullptr, 0, nullptr}};
#define NAME_STR2(n) #n
#define NAME_STR(n) NAME_STR2(n)
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, NAME_STR(TORCH_EXTENSION_NAME), nullptr, -1, methods};
#define INIT2(n) PyInit_##n
#define INIT(n) INIT2(n)
PyMODINIT_FUNC INIT(TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module); }
"""
mod = load_inline(name="evalfarm_test_segfault", cpp_sources=src, no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()

    def forward(self, x):
        return mod.crash(x)
