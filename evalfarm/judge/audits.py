"""Which timed rounds' outputs the judge checks against the reference (``audit_fraction``).

Every correctness round is checked. Of the timed rounds after them, one at a random position in
every window of ``round(1 / audit_fraction)`` rounds is (stratified sampling): the same share on
average as drawing each round independently, but a candidate that is wrong in every timed round
is caught within the first window, where independent draws let it through with probability
``(1 - audit_fraction) ** rounds`` (0.9 ** 35, about 2.5%, at 35 timed rounds). A candidate
wrong in some rounds only is caught in each window with probability (its wrong rounds there) /
(the window), as with independent draws. The positions come from the judge's secret generator,
one per window, drawn when the window is first reached; the candidate never learns them.
"""

from __future__ import annotations

import random


class AuditSchedule:
    def __init__(self, fraction: float, first_timed_round: int, rng: random.Random) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"audit fraction must be in [0, 1], got {fraction!r}")
        self.first_timed_round = first_timed_round
        self.window = 0 if fraction <= 0.0 else max(1, round(1.0 / fraction))
        self._rng = rng
        self._picks: dict[int, int] = {}

    def audited(self, r: int) -> bool:
        """Whether round ``r`` (0-based, as the judge numbers them) is checked."""
        if r < self.first_timed_round:
            return True
        if not self.window:
            return False
        window, position = divmod(r - self.first_timed_round, self.window)
        if window not in self._picks:
            self._picks[window] = self._rng.randrange(self.window)
        return position == self._picks[window]
