"""The one table of static rule ids and their roles.

* ``blocks``: the finding alone rejects the candidate (HACK_DETECTED) under every policy: the
  behaviour is unsafe to run, or it would be invisible to the runtime that decides verdicts.
* ``policy``: an optional behaviour; it rejects only when the policy forbids it
  (``flag`` names the :class:`~evalfarm.guards.policy.GuardPolicy` field that allows it).
* ``testifies``: evidence only; the runtime defences decide (see docs/security.md,
  "Static analysis testifies").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BLOCKS", "POLICY", "ROLES", "TESTIFIES", "Role", "role_of"]

BLOCKS: Literal["blocks"] = "blocks"
POLICY: Literal["policy"] = "policy"
TESTIFIES: Literal["testifies"] = "testifies"


@dataclass(frozen=True)
class Role:
    role: Literal["blocks", "policy", "testifies"]
    flag: str | None = None  # GuardPolicy field, for role "policy"


ROLES: dict[str, Role] = {
    # blocks: unsafe to run, or invisible at run time
    "harness_access": Role(BLOCKS),
    "process_abuse": Role(BLOCKS),
    "network": Role(BLOCKS),
    "filesystem": Role(BLOCKS),
    "symbol_interposition": Role(BLOCKS),
    # policy: optional behaviours
    "reduced_precision": Role(POLICY, "allow_reduced_precision"),
    "side_stream": Role(POLICY, "allow_streams"),
    "host_thread": Role(POLICY, "allow_threads"),
    "cuda_graph": Role(POLICY, "allow_cuda_graphs"),
    "torch_op": Role(POLICY, "allow_torch_ops"),
    "triton": Role(POLICY, "allow_triton"),
    # testifies: evidence; the runtime decides
    "interpreter_access": Role(TESTIFIES),
    "process_exit": Role(TESTIFIES),
    "file_access": Role(TESTIFIES),
    "dynamic_code": Role(TESTIFIES),
    "global_state": Role(TESTIFIES),
    "caching": Role(TESTIFIES),
    "lazy_output": Role(TESTIFIES),
    "comparator_patch": Role(TESTIFIES),
    "monkeypatch": Role(TESTIFIES),
    "seed_access": Role(TESTIFIES),
    "timer_patch": Role(TESTIFIES),
    "l2_persistence": Role(TESTIFIES),
}


def role_of(guard: str) -> Role:
    """The role of a rule id; an unknown id is a programming error (KeyError)."""
    return ROLES[guard]
