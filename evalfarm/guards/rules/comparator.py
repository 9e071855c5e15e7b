"""Comparator patching (``torch.allclose``, ``Tensor.__eq__``, ``torch.testing`` ...).
Runtime: outputs are compared in the judge's process, which the candidate never touches.
Role: testifies."""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import name_rules

RULE_IDS = ("comparator_patch",)

NAMES = name_rules(
    "comparator_patch",
    ["torch.testing.assert_close", "torch.testing.assert_allclose"],
    "uses the harness's comparator",
    hot_only=True,
)

COMPARATOR_ATTRS = {
    "allclose", "isclose", "equal", "eq", "ne", "__eq__", "__ne__", "__bool__", "__sub__",
    "__rsub__", "__abs__", "abs", "sub", "max", "min", "amax", "all", "any", "isnan", "isinf",
    "isfinite", "item", "tolist", "le", "lt", "ge", "gt", "__lt__", "__le__", "__gt__", "__ge__",
    "array_equal", "assert_close", "assert_allclose", "testing", "numpy", "__float__", "sum",
    "nan_to_num", "__len__", "__getitem__", "cpu", "to", "float", "double", "count_nonzero",
}


def on_patch(eng: Any, node: ast.AST, target: str, verb: str) -> bool:
    if target.split(".")[-1] in COMPARATOR_ATTRS or target.startswith(
            ("torch.testing", "numpy.testing")):
        eng.add("comparator_patch", node, f"{verb} {target}: patches what a comparator uses")
        return True
    return False
