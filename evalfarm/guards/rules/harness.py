"""The harness and the interpreter.

``harness_access`` (blocks): real in-process tampering with the worker's harness -- walking
frames (``sys._getframe``, ``inspect.currentframe``/``stack``, ``.f_back``/``.f_locals``),
walking the object graph (``gc.get_objects``/``get_referrers``/``get_referents``,
``__subclasses__``), reaching ``evalfarm``/``__main__``/pytest modules or ``sys.modules`` at all
(a computed key or an iteration can reach the worker's own module), installing trace,
profile, audit or import hooks, writing to builtins or to ``sys``. Invisible at run time: the
patched worker reports what the candidate wants it to.

``interpreter_access`` (testifies): powerful but ordinary tools (ctypes/cffi -- an honest kernel
may load libcuda; a crash through them is a RUNTIME_ERROR --, weakref, tracemalloc, gc tuning,
``sys.setrecursionlimit``, function internals such as ``__globals__``/``__code__``, reading
``__builtins__``, redirecting ``sys.stdout``).
"""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import cpp_rule, name_rules

RULE_IDS = ("harness_access", "interpreter_access")

NAMES = name_rules(
    "harness_access",
    [
        "sys.settrace", "sys.setprofile", "sys._getframe", "sys._current_frames",
        "sys.meta_path", "sys.path_hooks", "sys.addaudithook", "sys._current_exceptions",
        "threading.settrace", "threading.setprofile", "inspect.currentframe", "inspect.stack",
        "inspect.getouterframes", "inspect.getinnerframes", "inspect.trace",
        "gc.get_objects", "gc.get_referrers", "gc.get_referents", "__main__", "evalfarm",
        "pytest", "_pytest", "torch.testing._internal", "sys.modules",
    ],
    "reaches into the harness (frames, object graph, hooks, harness modules)",
)
NAMES |= name_rules(
    "interpreter_access",
    [
        "ctypes", "_ctypes", "cffi", "sys.setrecursionlimit", "sys.__stdout__",
        "sys.__stderr__", "inspect.getframeinfo", "inspect.getmembers", "gc.callbacks",
        "gc.disable", "gc.freeze", "builtins", "__builtins__", "weakref", "tracemalloc",
        "importlib.reload",
    ],
    "uses interpreter internals or foreign-function access",
)

CPP = (
    cpp_rule("harness_access", r"\bPyRun_\w+|\bPy_CompileString\w*|\bpy(?:bind11)?\s*::\s*"
             r"(?:exec|eval)\b|\bPyEval_GetGlobals\b|\bPyEval_GetFrame\b|"
             r"\bPyThreadState_GetFrame\b|\bPyEval_SetTrace\b|\bPyEval_SetProfile\b",
             "runs hidden Python or reaches interpreter frames from C++"),
    cpp_rule("interpreter_access", r"\bpy(?:bind11)?\s*::\s*module_?\s*::\s*import\b|"
             r"\bPyImport_\w+", "imports Python modules from C++"),
    cpp_rule("interpreter_access", r"__attribute__\s*\(\s*\(\s*constructor",
             "runs code when the library is loaded"),
)

_FRAME_ATTRS = {
    "f_back", "f_globals", "f_locals", "f_builtins", "gi_frame", "cr_frame", "ag_frame",
    "tb_frame", "tb_next", "__subclasses__",
}
_INTERNAL_ATTRS = {
    "__globals__", "__builtins__", "__closure__", "__code__", "co_code", "func_globals",
    "__getattribute__", "__reduce__", "__reduce_ex__", "__mro__", "__bases__", "__base__",
    "f_code",
}
_HARNESS_MODULES = ("evalfarm", "__main__", "pytest", "_pytest")
_STDIO = ("sys.stdout", "sys.stderr", "sys.stdin", "sys.displayhook", "sys.excepthook")


def on_attribute(eng: Any, node: ast.Attribute) -> None:
    if node.attr in _FRAME_ATTRS:
        eng.add("harness_access", node,
                f"`.{node.attr}` reaches frames or the object graph of other code")
    elif node.attr in _INTERNAL_ATTRS:
        eng.add("interpreter_access", node, f"`.{node.attr}` reads function/class internals")


def on_patch(eng: Any, node: ast.AST, target: str, verb: str) -> bool:
    root = target.split(".")[0]
    if target.startswith(_STDIO):
        eng.add("interpreter_access", node, f"{verb} {target}: redirects the worker's output")
        return True
    if root in ("builtins", "__builtins__", "sys", "gc", "inspect", "importlib") \
            or root in _HARNESS_MODULES:
        eng.add("harness_access", node, f"{verb} {target}: patches interpreter internals")
        return True
    return False


def on_subscript_store(eng: Any, target: ast.Subscript, base: str | None, value: Any,
                       stmt: ast.AST) -> None:
    if base == "sys.modules":
        eng.add("harness_access", stmt, "writes sys.modules")
    elif base in ("builtins.__dict__", "__builtins__"):
        eng.add("harness_access", stmt, "writes builtins")
