"""Lazy or fake outputs: tensor subclasses and dispatch modes that defer or intercept work.
Runtime: exact output type and storage checks (a plain, materialised torch.Tensor is required)
on fresh inputs every call. Role: testifies."""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import name_rules

RULE_IDS = ("lazy_output",)

NAMES = name_rules(
    "lazy_output",
    [
        "torch.Tensor._make_subclass", "torch.Tensor._make_wrapper_subclass",
        "torch._C._disabled_torch_function_impl", "torch.overrides.TorchFunctionMode",
        "torch.utils._python_dispatch", "torch.overrides", "torch._subclasses",
        "torch._C._set_torch_function_mode", "torch._C._push_on_torch_dispatch_stack",
    ],
    "tensor subclass / dispatch-mode machinery: outputs may be lazy or ops intercepted",
)


def on_function(eng: Any, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    if node.name in ("__torch_function__", "__torch_dispatch__"):
        eng.add("lazy_output", node, f"defines {node.name}, which intercepts tensor operations")


def on_class(eng: Any, node: ast.ClassDef) -> None:
    for base in node.bases:
        name = eng.index.resolve(base) or ""
        if name in ("torch.Tensor", "Tensor", "torch.nn.Parameter") or name.endswith(".Tensor"):
            eng.add("lazy_output", node,
                    f"class {node.name} subclasses {name}; outputs may be lazy or fake")
        if name.startswith(("torch.utils._python_dispatch", "torch.overrides")):
            eng.add("lazy_output", node, f"class {node.name} is a dispatch/function mode")


def on_attribute(eng: Any, node: ast.Attribute) -> None:
    if node.attr == "__class__" and isinstance(node.ctx, ast.Store):
        eng.add("lazy_output", node, "assigning __class__ changes an object's type")
    if node.attr in ("as_subclass", "_make_subclass", "_make_wrapper_subclass"):
        eng.add("lazy_output", node, f".{node.attr}() turns a tensor into a subclass")
