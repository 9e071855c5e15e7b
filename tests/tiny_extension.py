"""C++ for tests that need a real extension build but nothing of torch's C++ API.

A Python module written against ``<Python.h>`` alone and built with
``load_inline(..., no_implicit_headers=True)`` compiles in about a second; one that includes
``torch/extension.h`` (load_inline's default) takes 30-40 s on a 2-core machine, almost all of it
parsing that header. Tests of the build machinery (the cache, its trust, timeouts, verdicts of a
crashing or broken build, symbol checks) use these; the honest corpus and the built-in suite's
compiled variants still build real torch extensions.
"""

from __future__ import annotations

_MODULE = """
static PyMethodDef evalfarm_test_methods[] = {{{methods}{{nullptr, nullptr, 0, nullptr}}}};
#define EVALFARM_STR2(n) #n
#define EVALFARM_STR(n) EVALFARM_STR2(n)
static struct PyModuleDef evalfarm_test_module = {{
    PyModuleDef_HEAD_INIT, EVALFARM_STR(TORCH_EXTENSION_NAME), nullptr, -1, evalfarm_test_methods}};
#define EVALFARM_INIT2(n) PyInit_##n
#define EVALFARM_INIT(n) EVALFARM_INIT2(n)
PyMODINIT_FUNC EVALFARM_INIT(TORCH_EXTENSION_NAME)(void) {{ return PyModule_Create(&evalfarm_test_module); }}
"""


def python_module(functions: dict[str, str], prelude: str = "") -> str:
    """C++ source of a module named by load_inline's ``TORCH_EXTENSION_NAME``. ``functions`` maps
    each function's name to the body of ``static PyObject* NAME(PyObject* self, PyObject* arg)``
    (one argument, ``METH_O``); ``prelude`` goes after ``#include <Python.h>`` (more includes,
    helpers). Build it with ``load_inline(name, source, no_implicit_headers=True)``."""
    defs = "".join(f"static PyObject* {name}(PyObject* self, PyObject* arg) {{\n{body}\n}}\n"
                   for name, body in functions.items())
    methods = "".join(f'{{"{name}", {name}, METH_O, ""}}, ' for name in functions)
    return "#include <Python.h>\n" + prelude + "\n" + defs + _MODULE.format(methods=methods)


# Doubles a Python int: ``twice(21) == 42``.
TWICE = python_module({"twice": "return PyLong_FromLong(2 * PyLong_AsLong(arg));"})
