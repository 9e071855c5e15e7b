"""Time bounds: how long a call, and the judge's wait for one, may take.

The rule. A candidate call may take ``timeout_factor`` times the reference's estimated call, and
never less than ``min_call_timeout_s`` (``call_limit_s``); past that it is TIMEOUT. The estimate
starts from the set-up's warm reference call and follows every reference call of the rounds (an
exponential average: ``note_reference_call``). The judge waits for a call on its own clock for that
bound plus ``ROUND_SLACK_S``, and for the reference at least twice its estimate beyond that
(``wait_bound``): a slow reference call is the farm's problem, never the candidate's. Warm calls
look at the reference's usual call instead (``reference_call_s``: the median of its recent calls,
which a few slow ones on a loaded host do not move).
"""

from __future__ import annotations

import collections
import statistics

from evalfarm.config import ScoreConfig
from evalfarm.judge.roles import REFERENCE

ROUND_SLACK_S = 2.0


class Bounds:
    def __init__(self, config: ScoreConfig, t_ref_est: float) -> None:
        self.min_call_timeout_s = config.min_call_timeout_s
        self.timeout_factor = config.timeout_factor
        self.t_ref_est = t_ref_est  # seconds
        self.ref_recent: collections.deque[int] = collections.deque(maxlen=64)  # the last calls' ns

    def note_reference_call(self, t_ns: int) -> None:
        """A reference call's time, into the running estimate (call bounds) and the recent median
        (warm calls)."""
        self.t_ref_est = 0.9 * self.t_ref_est + 0.1 * t_ns / 1e9
        self.ref_recent.append(t_ns)

    def reference_call_s(self) -> float:
        """The reference's usual call: the median of its last calls (a few slow ones on a loaded host
        do not move it), or the set-up estimate before any."""
        return statistics.median(self.ref_recent) / 1e9 if self.ref_recent else self.t_ref_est

    def call_limit_s(self) -> float:
        return max(self.min_call_timeout_s, self.timeout_factor * self.t_ref_est)

    def wait_bound(self, role: str) -> float:
        """How long the judge waits for one call of ``role`` on its own clock: the per-call bound
        plus slack, and for the reference at least twice its estimated time plus the smallest
        bound (a slow reference call is the farm's problem, never the candidate's)."""
        limit = self.call_limit_s() + ROUND_SLACK_S
        if role == REFERENCE:
            limit = max(limit, 2 * self.t_ref_est + ROUND_SLACK_S + self.min_call_timeout_s)
        return limit
