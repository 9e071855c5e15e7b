"""Symbol interposition: C/C++ definitions named like the timer, synchronisation or clock
functions (cudaEventElapsedTime, cudaDeviceSynchronize, clock_gettime ...). Role: blocks --
a library loaded into the worker that shadows its own clock or sync is invisible to that clock.
"""

from __future__ import annotations

from evalfarm.guards.rules.base import cpp_rule

RULE_IDS = ("symbol_interposition",)

CPP = (
    cpp_rule("symbol_interposition",
             r"\b(?P<tok>cudaEventElapsedTime|cudaEventRecord|cudaEventSynchronize|cudaEventQuery|"
             r"cudaDeviceSynchronize|cudaStreamSynchronize|cudaStreamQuery|cuEventElapsedTime|"
             r"cuCtxSynchronize|cuStreamSynchronize|cuEventRecord|cuEventSynchronize|"
             r"clock_gettime|gettimeofday|clock|time|timespec_get)\s*\([^;{}()]*"
             r"(?:\([^;{}()]*\)[^;{}()]*)*\)\s*(?:noexcept\s*)?\{",
             "defines a function named like a timing/synchronisation API"),
    cpp_rule("symbol_interposition", r"\bLD_PRELOAD\b", "mentions LD_PRELOAD"),
)
