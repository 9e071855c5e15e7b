"""Monkeypatching torch (or any shared module): replacing functions or ATen operators.
Runtime: the reference runs in a separate process the candidate never touches, so a patch
changes only the candidate's own results, which are checked. Role: testifies."""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import cpp_rule, name_rules

RULE_IDS = ("monkeypatch",)

NAMES = name_rules("monkeypatch", ["unittest.mock"], "patches objects at run time")

CPP = (
    cpp_rule("monkeypatch",
             r"\bTORCH_LIBRARY_IMPL\s*\(\s*aten\b|\bTORCH_LIBRARY_FRAGMENT\s*\(\s*aten\b",
             "overrides ATen operators"),
)


def on_attribute(eng: Any, node: ast.Attribute) -> None:
    if node.attr == "__dict__":
        base = eng.index.resolve(node.value)
        if base and base != "self":
            eng.add("monkeypatch", node, f"{base}.__dict__ exposes a module/class namespace")


def on_call(eng: Any, node: ast.Call, fn: str | None, method: str | None) -> None:
    args = node.args
    if fn == "vars" and fn not in eng.index.local_names and args:
        base = eng.index.resolve(args[0])
        if base and eng.index.is_module_like(base):
            eng.add("monkeypatch", node, f"vars({base}) exposes a module namespace")
    if fn in ("torch.library.Library", "torch.library.impl", "torch.library.define") and args:
        ns = eng.index.const_str(args[0]) or ""
        if ns.split("::")[0] in ("aten", "prims", "") or ns.startswith("aten"):
            eng.add("monkeypatch", node, f"{fn}({ns!r}) overrides ATen operators")


def on_patch(eng: Any, node: ast.AST, target: str, verb: str) -> bool:
    eng.add("monkeypatch", node, f"{verb} {target}: patches a shared module")
    return True
