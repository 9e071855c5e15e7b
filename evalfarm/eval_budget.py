"""How long an evaluation may run, and whose fault an overrun is: one rule, local and on the farm.

The rule:

* **A judge run's budget.** Each judge process of an evaluation (the first run, a
  re-verification, the other-size check) may take ``load_timeout_s + 4 x timing_budget_s +
  900 s`` of wall time from its request (``judge_budget_s``). The judge bounds every step it
  waits on itself; what is left to run past that budget is the candidate's own slowness.
* **An evaluation's deadline.** A caller may bound the whole evaluation (build, every judge run)
  with a deadline: ``deadline_s`` of a farm request, counted from when a slot starts the
  evaluation, or ``deadline_s`` of ``evalfarm.scoring.start`` (from the call). Each judge run
  then gets the smaller of its budget and the time left (``run_budget``).
* **Running past either is TIMEOUT**, a verdict charged to the candidate (its reward is that of
  a failure), the same verdict whether it was scored locally or by a daemon. Time the candidate
  does not cause is not counted: the wait for a slot in the daemon's queue (the deadline starts
  with the slot) and the wait for the GPU lease (``WallBudget.pause``).
* **The farm's own fault.** A daemon gives an evaluation ``DEADLINE_GRACE_S`` past its deadline to
  stop its processes and report its TIMEOUT. An evaluation that has not reported by then is stuck
  in the farm, not in the candidate: INFRA_ERROR "deadline exceeded" (final; the client does not
  retry it). So is a request whose gRPC deadline passed while it waited in the queue.

``run_budget``, ``evaluation_deadline_s`` and the two details are pure; ``WallBudget`` is the
clock a judge run waits on. A daemon's ``max_eval_s`` is the deadline of a request that gives
none (and caps a longer one). A paused ``WallBudget`` (the GPU lease wait) can outlast a
deadline: the daemon then reports the farm's fault, never the candidate's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from evalfarm.config import ScoreConfig

# The judge's own allowance on top of the load timeout and four timing budgets (correctness,
# set-up, its audits and everything that is not a timed round).
JUDGE_ALLOWANCE_S = 900.0
# How long a daemon waits past an evaluation's deadline for its TIMEOUT before calling it stuck.
DEADLINE_GRACE_S = 30.0


def judge_budget_s(cfg: ScoreConfig) -> float:
    """The wall budget of one judge run under ``cfg`` (seconds)."""
    return cfg.load_timeout_s + 4 * cfg.timing_budget_s + JUDGE_ALLOWANCE_S


@dataclass(frozen=True)
class RunBudget:
    """One judge run's wall budget and what set it."""

    seconds: float  # may be 0: the deadline has already passed
    by_deadline: bool  # the evaluation's deadline, not the judge budget, is the nearer bound


def run_budget(cfg: ScoreConfig, deadline_left_s: float | None) -> RunBudget:
    """The budget of a judge run that starts with ``deadline_left_s`` left of the evaluation's
    deadline (None: no deadline)."""
    own = judge_budget_s(cfg)
    if deadline_left_s is None or deadline_left_s >= own:
        return RunBudget(own, False)
    return RunBudget(max(0.0, deadline_left_s), True)


def overrun_detail(cfg: ScoreConfig, budget: RunBudget, deadline_s: float | None, where: str = "the evaluation") -> str:
    """The TIMEOUT detail for ``where`` having run past ``budget``."""
    if budget.by_deadline and deadline_s is not None:
        return f"{where} ran past the evaluation's deadline of {deadline_s:g} s"
    return (f"{where} ran past its wall budget of {judge_budget_s(cfg):.0f} s (load timeout + 4 x timing "
            f"budget + {JUDGE_ALLOWANCE_S:.0f} s)")


def evaluation_deadline_s(requested_s: float, max_eval_s: float) -> float:
    """A farm evaluation's deadline: the request's ``deadline_s`` (0: none given), never longer
    than the daemon's ``max_eval_s``."""
    return min(requested_s, max_eval_s) if requested_s > 0 else max_eval_s


def stuck_detail(deadline_s: float, grace_s: float) -> str:
    """The INFRA_ERROR detail of an evaluation that did not report its TIMEOUT in time (the
    client treats a detail starting "deadline exceeded" as final)."""
    return (f"deadline exceeded: the evaluation had not ended {grace_s:g} s after its deadline of "
            f"{deadline_s:g} s (the farm's fault, not the candidate's)")


class WallBudget:
    """A judge run's wall budget, which stops while the judge waits for something that is not
    the candidate's doing (its GPU lease); a paused budget is still bounded by the wait's own bound."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._deadline = clock() + seconds
        self._left_at_pause: float | None = None

    def left(self) -> float:
        return max(0.0, self._deadline - self._clock())

    def pause(self, bound_s: float) -> None:
        """Stop the clock for a wait of at most ``bound_s``."""
        if self._left_at_pause is None:
            self._left_at_pause = self.left()
        self._deadline = self._clock() + bound_s + self._left_at_pause

    def resume(self) -> None:
        """Go on with what was left when the wait began (no-op when not paused)."""
        if self._left_at_pause is not None:
            self._deadline = self._clock() + self._left_at_pause
            self._left_at_pause = None
