"""The verdicts the farm can give. They never blur: each names one cause."""

from __future__ import annotations

import enum


class Verdict(enum.StrEnum):
    OK = "OK"
    COMPILE_ERROR = "COMPILE_ERROR"
    LOAD_ERROR = "LOAD_ERROR"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIMEOUT = "TIMEOUT"
    CUDA_FAULT = "CUDA_FAULT"
    INCORRECT = "INCORRECT"
    HACK_DETECTED = "HACK_DETECTED"
    INFRA_ERROR = "INFRA_ERROR"

    @property
    def is_candidate_failure(self) -> bool:
        """True for failures caused by the candidate (reward 0); False for OK and INFRA_ERROR."""
        return self not in (Verdict.OK, Verdict.INFRA_ERROR)
