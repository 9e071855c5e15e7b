"""Static guards: the candidate's Python AST, its inline C++/CUDA, and the built extension's
dynamic symbols. Any finding means HACK_DETECTED with the finding's reason (see docs/security.md).

    from evalfarm.guards import GuardPolicy, check_candidate_source, check_extension_symbols
    findings = check_candidate_source(src, GuardPolicy.from_name("paper"), reference_source=ref)
"""

from evalfarm.guards.policy import GuardPolicy
from evalfarm.guards.static_checks import (
    CandidateSyntaxError,
    Finding,
    check_candidate_source,
    check_cpp_source,
    reference_precisions,
)
from evalfarm.guards.symbols import (
    DynamicSymbol,
    ElfError,
    check_extension_symbols,
    read_dynamic_symbols,
)

__all__ = [
    "CandidateSyntaxError",
    "DynamicSymbol",
    "ElfError",
    "Finding",
    "GuardPolicy",
    "check_candidate_source",
    "check_cpp_source",
    "check_extension_symbols",
    "read_dynamic_symbols",
    "reference_precisions",
]
