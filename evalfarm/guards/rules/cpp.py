"""Inline C++/CUDA handed to a compiler from Python (``load_inline``, cupy ``RawModule`` ...):
the source text is evaluated (constants, templates, builder functions) and scanned with the
``CPP`` patterns of every rule module. A source that cannot be evaluated statically is
``dynamic_code`` evidence. Strings elsewhere that look like C++ are scanned too
(:func:`evalfarm.guards.analysis.cpp.scan_strings`)."""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import short

RULE_IDS: tuple[str, ...] = ()

_COMPILERS = {"RawKernel", "RawModule", "ElementwiseKernel", "ReductionKernel", "SourceModule",
              "compile_ptx", "Program"}


def on_call(eng: Any, node: ast.Call, fn: str | None, method: str | None) -> None:
    from evalfarm.guards.analysis.cpp import check_cpp_source

    if not fn:
        return
    last = fn.split(".")[-1]
    kwnames: tuple[str, ...]
    if last in ("load_inline", "load_inline_cuda"):
        positions, kwnames = (1, 2), ("cpp_sources", "cuda_sources")
    elif last in _COMPILERS:
        positions, kwnames = (0, 1, 2), ("code", "source", "operation", "src")
    else:
        return
    src_nodes = [node.args[i] for i in positions if i < len(node.args)]
    src_nodes += [kw.value for kw in node.keywords if kw.arg in kwnames]
    scope = eng.scope()
    for s in src_nodes:
        if isinstance(s, ast.Constant) and s.value is None:
            continue
        text = eng.index.const_str(s, scope=scope, template=True)
        if text is None or (not text.strip() and not isinstance(s, ast.Constant)):
            eng.add("dynamic_code", node,
                    f"{last}() source `{short(s)}` is computed at run time; its C++/CUDA "
                    "cannot be checked statically")
            continue
        for sub in ast.walk(s):
            eng.cpp_arg_nodes.add(id(sub))
        for f in check_cpp_source(text, eng.policy, allowed_precisions=eng.precisions,
                                  where=f"{last}() source"):
            eng.add(f.guard, node, f.reason)
