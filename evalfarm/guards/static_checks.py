"""Compatibility module: the static checks now live in :mod:`evalfarm.guards.analysis` (the
shared name index and the AST walk) and :mod:`evalfarm.guards.rules` (one module per threat)."""

from evalfarm.guards.analysis import check_candidate_source, check_cpp_source, reference_precisions
from evalfarm.guards.findings import CandidateSyntaxError, Finding, blocking

__all__ = [
    "CandidateSyntaxError",
    "Finding",
    "blocking",
    "check_candidate_source",
    "check_cpp_source",
    "reference_precisions",
]
