"""Static analysis of a candidate: :func:`check_candidate_source` (never executes it)."""

from __future__ import annotations

import ast
import dataclasses
import sys
import warnings

from evalfarm.guards.analysis.cpp import check_cpp_source
from evalfarm.guards.analysis.engine import Engine
from evalfarm.guards.findings import CandidateSyntaxError, Finding
from evalfarm.guards.policy import GuardPolicy
from evalfarm.guards.rules.precision import reference_precisions

__all__ = ["check_candidate_source", "check_cpp_source", "reference_precisions"]

# Nesting deeper than this is not analysed (the walk is recursive); no honest kernel comes
# close, and Python's own compiler refuses far less.
_MAX_DEPTH = 400


def _too_deep(tree: ast.AST) -> bool:
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, d = stack.pop()
        if d > _MAX_DEPTH:
            return True
        stack.extend((c, d + 1) for c in ast.iter_child_nodes(node))
    return False


def check_candidate_source(
    source: str,
    policy: GuardPolicy = GuardPolicy(),  # noqa: B008 - frozen dataclass, immutable default
    reference_source: str | None = None,
) -> list[Finding]:
    """Run every static rule on a candidate's source and return ALL findings, ordered by line.

    Each finding has ``blocking`` set: whether it alone decides HACK_DETECTED under
    ``policy`` (see :mod:`evalfarm.guards.rule_roles`); :func:`evalfarm.guards.blocking` keeps those.
    ``reference_source`` (the task file) exempts reduced precision the reference itself uses.
    Raises :class:`CandidateSyntaxError` (a ``ValueError``) if the candidate does not parse or
    is nested too deeply to analyse; that is a compile error of the candidate, not a hack.
    """
    try:
        with warnings.catch_warnings():  # SyntaxWarnings of the candidate are not ours
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename="<candidate>", mode="exec")
            if _too_deep(tree):
                raise CandidateSyntaxError(
                    f"candidate is nested more than {_MAX_DEPTH} levels deep; not analysed")
            # Some errors only the compiler reports (e.g. a bare starred expression, `*0`).
            compile(tree, "<candidate>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise CandidateSyntaxError(
            f"line {exc.lineno}: candidate is not valid Python: {exc.msg}", exc.lineno
        ) from exc
    except (ValueError, RecursionError, MemoryError) as exc:
        if isinstance(exc, CandidateSyntaxError):
            raise
        raise CandidateSyntaxError(f"candidate cannot be parsed: {type(exc).__name__}: {exc}") \
            from exc
    engine = Engine(tree, policy, reference_precisions(reference_source))
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(limit, 4 * _MAX_DEPTH + 1000))
        findings = engine.run()
    except RecursionError:
        findings = engine.findings + [
            Finding("dynamic_code", "candidate is nested too deeply to analyse statically")
        ]
    finally:
        sys.setrecursionlimit(limit)
    findings = [dataclasses.replace(f, blocking=policy.blocks(f.guard)) for f in findings]
    return sorted(findings, key=lambda f: (f.line if f.line is not None else -1, f.guard))
