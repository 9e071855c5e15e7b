"""Static guards: the candidate's Python AST, its inline C++/CUDA, and the built extension's
dynamic symbols. Static analysis testifies: every finding is reported with its line, and it
decides HACK_DETECTED alone only when ``finding.blocking`` is set -- its rule is unsafe to run
or invisible at run time, or the policy forbids the optional behaviour (see
:mod:`evalfarm.guards.rule_roles` and docs/security.md, "Static analysis testifies").

    from evalfarm.guards import GuardPolicy, blocking, check_candidate_source
    findings = check_candidate_source(src, GuardPolicy.from_name("honest"), reference_source=ref)
    rejected = blocking(findings)   # non-empty: HACK_DETECTED; the rest is evidence
"""

from evalfarm.guards.analysis import check_candidate_source, check_cpp_source, reference_precisions
from evalfarm.guards.findings import CandidateSyntaxError, Finding, blocking
from evalfarm.guards.policy import DEFAULT_POLICY, GuardPolicy
from evalfarm.guards.rule_roles import ROLES, Role, role_of
from evalfarm.guards.symbols import (
    DynamicSymbol,
    ElfError,
    check_extension_symbols,
    read_dynamic_symbols,
)

__all__ = [
    "DEFAULT_POLICY",
    "ROLES",
    "CandidateSyntaxError",
    "DynamicSymbol",
    "ElfError",
    "Finding",
    "GuardPolicy",
    "Role",
    "blocking",
    "check_candidate_source",
    "check_cpp_source",
    "check_extension_symbols",
    "read_dynamic_symbols",
    "reference_precisions",
    "role_of",
]
