"""Code the static checks cannot read: exec/eval, decoding, pickles, computed imports and
attribute names, sources read from files. Runtime: whatever the code does is still measured
on fresh inputs with the reference out of reach. Role: testifies."""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import cpp_rule, name_rules

RULE_IDS = ("dynamic_code",)

NAMES = name_rules(
    "dynamic_code",
    [
        "exec", "eval", "compile", "marshal", "pickle", "_pickle", "dill", "cloudpickle",
        "runpy", "importlib.util", "importlib.machinery", "importlib.__import__",
        "importlib.abc", "zipimport", "types.FunctionType", "types.CodeType",
        "types.ModuleType", "base64", "binascii", "zlib.decompress", "bz2", "lzma",
        "codecs.decode", "torch.jit.load", "torch.package",
    ],
    "runs or decodes code/data the static checks cannot see",
)

CPP = (
    cpp_rule("dynamic_code", r"\bdlopen\b|\bdlsym\b|\bdlvsym\b|\bdlmopen\b|"
             r"\bcudaGetDriverEntryPoint\w*|\bcuGetProcAddress\w*",
             "looks functions up at run time (dlopen/dlsym)"),
)


def on_class(eng: Any, node: ast.ClassDef) -> None:
    for kw in node.keywords:
        if kw.arg == "metaclass":
            eng.add("dynamic_code", node, f"class {node.name} uses a custom metaclass")


def on_import_from(eng: Any, node: ast.ImportFrom) -> None:
    if node.level == 0 and any(a.name == "*" for a in node.names):
        eng.add("dynamic_code", node, f"`from {node.module} import *` hides which names are used")


def on_call(eng: Any, node: ast.Call, fn: str | None, method: str | None) -> None:
    args = node.args
    if fn in ("__import__", "importlib.import_module", "importlib.__import__") and args \
            and eng.index.const_str(args[0]) is None:
        eng.add("dynamic_code", node, f"{fn}() with a computed module name")
    if fn in ("getattr", "setattr", "delattr") and len(args) >= 2 \
            and eng.index.const_str(args[1]) is None:
        base = eng.index.resolve(args[0])
        if base and base != "self" and eng.index.is_module_like(base):
            eng.add("dynamic_code", node, f"{fn}({base}, <computed name>) hides which "
                    "attribute is used")
