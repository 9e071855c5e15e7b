"""Scanning C++/CUDA source text with the ``CPP`` patterns of the rule modules.

Comments are removed by a linear-time scanner that respects string and character literals
(a ``//`` inside a string literal does not hide the rest of the line); every pattern uses
bounded repetition, so a hostile source cannot make the scan quadratic.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from evalfarm.guards.findings import Finding
from evalfarm.guards.policy import GuardPolicy
from evalfarm.guards.rules.base import CppRule

__all__ = ["check_cpp_source", "cpp_rules", "scan_strings", "strip_cpp_comments"]

_CPP_LOOKS = re.compile(
    r"#\s*include|__global__|__device__|PYBIND11_MODULE|\btorch\s*::|\bat\s*::|extern\s+\"C\"|"
    r"TORCH_LIBRARY|\bstd\s*::|\bvoid\s+\w+\s*\(|\bblockIdx\b|\bthreadIdx\b|\bcuda[A-Z]\w*\s*\("
)
_SPECIAL = re.compile(r"[\"'/]")
_LITERAL_END = {'"': re.compile(r'[\\\n"]'), "'": re.compile(r"[\\\n']")}
_RULES: tuple[CppRule, ...] | None = None


def cpp_rules() -> tuple[CppRule, ...]:
    global _RULES
    if _RULES is None:
        from evalfarm.guards.rules import MODULES

        _RULES = tuple(r for m in MODULES for r in getattr(m, "CPP", ()))
    return _RULES


def strip_cpp_comments(text: str) -> str:
    """Remove // and /* */ comments, keeping newlines (line numbers) and literals. O(n)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        m = _SPECIAL.search(text, i)
        if m is None:
            out.append(text[i:])
            break
        j = m.start()
        c = text[j]
        if c == "/":
            nxt = text[j + 1: j + 2]
            if nxt == "/":
                end = text.find("\n", j)
                end = n if end < 0 else end
                out.append(text[i:j])
                i = end
                continue
            if nxt == "*":
                end = text.find("*/", j + 2)
                end = n if end < 0 else end + 2
                out.append(text[i:j])
                out.append(" " + "\n" * text.count("\n", j, end))
                i = end
                continue
            out.append(text[i: j + 1])
            i = j + 1
            continue
        # a string or character literal: up to its closing quote or the end of the line
        close = _LITERAL_END[c]
        k = j + 1
        while True:
            e = close.search(text, k)
            if e is None:
                end = n
                break
            ch = text[e.start()]
            if ch == "\\":
                k = e.start() + 2
                continue
            end = e.start() + (1 if ch == c else 0)
            break
        out.append(text[i:end])
        i = max(end, j + 1)
    return "".join(out)


def check_cpp_source(
    text: str,
    policy: GuardPolicy = GuardPolicy(),  # noqa: B008 - frozen dataclass, immutable default
    *,
    first_line: int | None = None,
    allowed_precisions: frozenset[str] = frozenset(),
    where: str = "C++/CUDA source",
) -> list[Finding]:
    """Scan one C++/CUDA source text. ``first_line`` is the Python line the text starts on.
    Every finding has ``blocking`` set for ``policy``."""
    code = strip_cpp_comments(text)
    found: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for rule in cpp_rules():
        if rule.precision is not None and rule.precision in allowed_precisions:
            continue
        for m in rule.pattern.finditer(code):
            raw = m.group("tok") if "tok" in rule.pattern.groupindex else m.group(0)
            token = re.sub(r"\s+", "", raw)[:60]
            if (rule.guard, token) in seen:
                continue
            seen.add((rule.guard, token))
            line = None if first_line is None else first_line + code.count("\n", 0, m.start())
            prefix = f"line {line}: " if line is not None else ""
            found.append(Finding(rule.guard, f"{prefix}{where} contains `{token}`: {rule.reason}",
                                 line, policy.blocks(rule.guard)))
    return found


def scan_strings(eng: Any) -> None:
    """Scan string constants that look like C++/CUDA (or were passed to a compiler)."""
    for node in ast.walk(eng.tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if id(node) in eng.index.docstrings:
            continue
        text = node.value
        if id(node) not in eng.cpp_arg_nodes and not _CPP_LOOKS.search(text):
            continue
        for f in check_cpp_source(text, eng.policy, first_line=node.lineno,
                                  allowed_precisions=eng.precisions, where="C++/CUDA string"):
            eng.add_finding(f)
