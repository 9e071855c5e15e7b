"""Building blocks of the rule modules: name rules, C++ patterns, and name normalisation.

A rule module (one per threat idea) may define:

* ``RULE_IDS``: the rule ids it reports (each listed in :data:`evalfarm.guards.rule_roles.ROLES`);
* ``NAMES``: ``{dotted prefix: NameRule}`` matched against every resolved name (imports,
  attribute chains, aliases, ``getattr`` strings, ``__import__``, ``sys.modules[...]``);
* ``CPP``: :class:`CppRule` patterns for inline C++/CUDA sources;
* hooks called by the one AST walk (:mod:`evalfarm.guards.analysis.engine`), each with the
  engine ``eng`` first: ``on_function``, ``on_class``, ``on_attribute``, ``on_call``,
  ``on_self_store``, ``on_subscript_store``, ``on_patch`` (a write to a module/class
  attribute; return True to claim it), ``on_return``, ``on_raise``, ``on_global``,
  ``on_binop``, ``on_name``, ``on_import_from``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class NameRule:
    guard: str
    reason: str
    hot_only: bool = False  # only inside forward (and what it calls) or at module level
    precision: str | None = None  # reduced-precision family, for the reference exemption


def name_rules(guard: str, names: Iterable[str], reason: str, **kw: object) -> dict[str, NameRule]:
    return {n: NameRule(guard, reason, **kw) for n in names}  # type: ignore[arg-type]


@dataclass(frozen=True)
class CppRule:
    guard: str
    pattern: re.Pattern[str]
    reason: str
    precision: str | None = None


def cpp_rule(guard: str, pattern: str, reason: str, precision: str | None = None) -> CppRule:
    return CppRule(guard, re.compile(pattern), reason, precision)


# Submodules re-exported under a shorter name: normalise to the name the rules use.
_NORMALIZE = (
    ("torch.cuda.streams", "torch.cuda"),
    ("torch.cuda.graphs", "torch.cuda"),
    ("torch.cuda.random", "torch.cuda"),
    ("torch._C._TensorBase", "torch.Tensor"),
    ("torch._C.TensorBase", "torch.Tensor"),
    ("torch._tensor.Tensor", "torch.Tensor"),
    ("torch.nn.parameter.Parameter", "torch.nn.Parameter"),
    ("torch.cuda.amp.autocast_mode", "torch.cuda.amp"),
    ("torch.amp.autocast_mode", "torch.amp"),
    ("torch.functional", "torch"),
)


def normalize(name: str) -> str:
    for old, new in _NORMALIZE:
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return name


def prefixes(name: str) -> Iterator[str]:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        yield ".".join(parts[:i])


def matches(name: str, prefixes_: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes_)


def self_attr(node: object) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id == "self":
        return node.attr
    return None


def short(node: object, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - unparse of odd trees; the message is best effort
        text = type(node).__name__
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
