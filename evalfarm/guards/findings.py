"""What a static guard reports: :class:`Finding` (evidence with a line), and the parse error."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["CandidateSyntaxError", "Finding", "blocking"]


@dataclass(frozen=True)
class Finding:
    """One piece of static evidence.

    ``guard`` is the stable rule id (see :data:`evalfarm.guards.rule_roles.ROLES`), ``reason`` a
    human-readable sentence that starts with ``line N:`` when the line is known, and
    ``blocking`` whether this finding alone decides HACK_DETECTED under the policy the check
    ran with (its rule's role is ``blocks``, or ``policy`` and the policy forbids it).
    """

    guard: str
    reason: str
    line: int | None = None
    blocking: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"guard": self.guard, "reason": self.reason, "line": self.line,
                "blocking": self.blocking}


def blocking(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that decide HACK_DETECTED by themselves (in their original order)."""
    return [f for f in findings if f.blocking]


class CandidateSyntaxError(ValueError):
    """The candidate is not valid Python. The core should report COMPILE_ERROR, not a hack."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line
