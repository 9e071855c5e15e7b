"""Why an INFRA_ERROR happened, as far as it decides what happens next: one field, one rule.

An INFRA_ERROR is never the candidate's verdict; what to do with it depends on its cause, which
travels with the result (``ScoreResult.infra_cause``; ``ScoredSample.infra_cause`` on the wire),
never as words in its detail. The rule, used by the client's retries (``evalfarm.client.core``)
and the daemon's slot health (``evalfarm.server.slot_health``):

=================  ==========================================================  =======  ===========
cause              when                                                        retried  slot's fault
=================  ==========================================================  =======  ===========
``other``          any other farm fault (a judge that died, a slot taken out)  yes      yes
``deadline``       an evaluation stuck past its deadline, a call whose gRPC    no       no
                   deadline passed in the queue (evalfarm.eval_budget)
``draining``       the daemon was shutting down                                yes      no
``task_too_large`` the task does not fit the device's free memory              no       yes
                   (evalfarm.judge.memory_plan)
=================  ==========================================================  =======  ===========

"Retried": the client sends the sample to another daemon (up to its attempts); a final cause
would give the same answer again. "Slot's fault": the slot's run of faults counts it
(a deadline or a drain is not the slot's doing).
"""

from __future__ import annotations

import enum


class InfraCause(enum.StrEnum):
    OTHER = "other"
    DEADLINE = "deadline"
    DRAINING = "draining"
    TASK_TOO_LARGE = "task_too_large"

    @property
    def retried(self) -> bool:
        """Whether the client sends the sample to another daemon."""
        return self in (InfraCause.OTHER, InfraCause.DRAINING)

    @property
    def slots_fault(self) -> bool:
        """Whether it counts in the slot's run of faults."""
        return self in (InfraCause.OTHER, InfraCause.TASK_TOO_LARGE)


def parse(value: object) -> InfraCause:
    """The cause named by ``value`` (a result's field, old or new); OTHER when unknown or empty."""
    try:
        return InfraCause(str(value))
    except ValueError:
        return InfraCause.OTHER
