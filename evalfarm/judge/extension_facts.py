"""What the evidence says about a candidate's own extensions, beyond the verdict.

A candidate may catch a failed ``load_inline`` build and go on in PyTorch (evalfarm.build.hook):
it is judged like any other code, and the evidence says what happened, so a learner can pay
only for kernels that really run.

* ``worker_build_failures``: the build failures raised to the candidate in its worker (all
  caught, or there would be no verdict past loading), as the worker reported them.
"""

from __future__ import annotations

from typing import Any


def worker_build_failures(value: Any) -> list[dict[str, Any]]:
    """The worker's report of the build failures it raised to the candidate (an untrusted process's
    word: evidence only), checked and cut to size."""
    out: list[dict[str, Any]] = []
    if not isinstance(value, list):
        return out
    for item in value[:16]:
        if not isinstance(item, dict):
            continue
        entry: dict[str, Any] = {"name": str(item.get("name", ""))[:200], "key": str(item.get("key", ""))[:64],
                                 "recorded": bool(item.get("recorded"))}
        if not entry["recorded"]:  # built in the candidate's own process (a call discover did not see)
            entry["log"] = str(item.get("log", ""))[-4000:]
        out.append(entry)
    return out
