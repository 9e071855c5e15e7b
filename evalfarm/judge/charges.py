"""Charged time: what the judge adds to every candidate call for time its report left out.

The rule. A candidate's call time is what its own process reports, so the judge checks the report
against what it can see itself, and adds any excess beyond noise to every candidate call, in full:

* the untimed moment before each call (flush and synchronise, inputs already written): its median
  in the candidate's process against the reference's (``pre_call_charge_ns``);
* the judge's own clock around each exchange (go sent, result received) beyond the call reported:
  the median of the rounds' paired differences against the reference's (``exchange_charge_ns``),
  charged where ``ScoreConfig.exchange_charged``, else only reported;
* the charge is the larger of the two (``Charges.charge``); below the slack nothing is charged.

On a GPU the candidate's clock is also checked against the CUDA events its worker records inside
each timed call (``clock_behind_events``): a call cannot take less by the clock around it than by
the events within it, so a median round behind its events means a tampered clock.
"""

from __future__ import annotations

import dataclasses
import statistics

from evalfarm.judge.samples import Samples
from evalfarm.judge.timed_blocks import tail_charge_ns
from evalfarm.result import TimingEvidence

# Noise allowed between the two workers' pre-call moments before the excess is charged.
PRE_CALL_SLACK_NS = 10_000
# Noise allowed between the two workers' judge-timed leftovers before the excess is charged: this
# much plus this share of the reference's median leftover.
EXCHANGE_SLACK_NS = 10_000
EXCHANGE_SLACK_FRACTION = 0.1
# ... and this share of the candidate's own median call (what its memory traffic leaves behind,
# dirty cache lines written back after it returns, is not charged up to this much).
EXCHANGE_SLACK_CALL_FRACTION = 0.05
# A synchronised call's time by the worker's clock encloses the CUDA events recorded inside it on its
# stream: where the candidate's calls (median of the rounds' differences) took more by events than
# by the clock, beyond this slack (and this share of the event time), the clock was tampered with.
CLOCK_BEHIND_EVENTS_SLACK_US = 20.0
CLOCK_BEHIND_EVENTS_FRACTION = 0.1


@dataclasses.dataclass(frozen=True)
class Charges:
    """The charges of a set of samples, in nanoseconds per candidate call."""

    pre: int = 0  # pre_call_charge_ns
    exchange: int = 0  # what of ``excess`` is charged (all of it where exchange_charged, else 0)
    excess: int = 0  # exchange_charge_ns plus the timed blocks' tail_charge_ns
    charge: int = 0  # what is added to every candidate call: the larger of pre and exchange

    @classmethod
    def of(cls, samples: Samples, exchange_charged: bool) -> Charges:
        pre = pre_call_charge_ns(samples.pre_ref, samples.pre_cand)
        excess = (exchange_charge_ns(samples.untimed_ref, samples.untimed_cand, samples.t_cand)
                  + tail_charge_ns(samples.tails_ref, samples.tails_cand))
        exchange = excess if exchange_charged else 0
        return cls(pre, exchange, excess, max(pre, exchange))

    def notes(self, timing: TimingEvidence) -> list[str]:
        """The evidence's guard notes on what was charged, or seen and not charged."""
        notes = []
        exchange_applied = bool(self.exchange) and self.exchange >= self.pre  # charge = max of the two
        if exchange_applied:
            notes.append(
                f"exchange_charge: by the judge's clock, each exchange with the candidate's process took "
                f"{timing.untimed_cand_us_median:.1f} us beyond the call it reported (median), against "
                f"{timing.untimed_ref_us_median:.1f} us for the reference's; the {self.exchange / 1e3:.1f} us "
                "excess per round (median of the rounds' differences) is added to every candidate call: "
                "work outside its reported call, or a call reported shorter than it took")
        elif self.excess:
            notes.append(
                f"exchange_excess: by the judge's clock, each exchange with the candidate's process took "
                f"{timing.untimed_cand_us_median:.1f} us beyond the call it reported (median), against "
                f"{timing.untimed_ref_us_median:.1f} us for the reference's ({self.excess / 1e3:.1f} us more per "
                "round); not charged (charge_exchange off, or unset on a CPU): work outside its reported call, a call "
                "reported shorter than it took, or a busy host")
        if self.pre and not exchange_applied:
            notes.append(
                f"pre_call_charge: the moment before each call (flush and sync, inputs already written) took "
                f"{timing.pre_call_cand_us_median:.1f} us in the candidate's process against "
                f"{timing.pre_call_ref_us_median:.1f} us in the reference's; the {self.charge / 1e3:.1f} us excess "
                "is added to every candidate call")
        return notes


def exchange_charge_ns(untimed_ref: list[int], untimed_cand: list[int], cand_calls: list[int] | None = None) -> int:
    """What to add to every candidate call for time the judge's own clock saw and the candidate's
    report did not.

    For each call the judge times the whole exchange (go sent, result received) and subtracts the
    call time the worker reported: what is left is the same protocol work in both workers (the
    pre-call flush, the output copy and checks, the messages), so its median is the same for the
    reference and an honest candidate. The candidate's process reports its own call time, and
    code in that process can change what it reports (a patched clock) or do work after it
    (a thread still running when the call returns); either makes its leftover longer than the
    reference's. The median of the rounds' paired differences beyond noise (10 us, plus 10% of the
    reference's median leftover, plus 5% of the candidate's median reported call ``cand_calls``)
    is charged in full; below it nothing is. An under-report hides at most that slack."""
    if not untimed_ref or len(untimed_ref) != len(untimed_cand):
        return 0
    excess = statistics.median([c - r for r, c in zip(untimed_ref, untimed_cand, strict=True)])
    slack = EXCHANGE_SLACK_NS + EXCHANGE_SLACK_FRACTION * statistics.median(untimed_ref)
    if cand_calls:
        slack += EXCHANGE_SLACK_CALL_FRACTION * statistics.median(cand_calls)
    return int(excess) if excess > slack else 0


def pre_call_charge_ns(pre_ref: list[int], pre_cand: list[int]) -> int:
    """What to add to every candidate call for work done in the untimed moment before it.

    Between the judge writing a call's inputs and the call starting, each worker flushes the L2
    and synchronises: the same work in both processes. Work the candidate's process starts on the
    inputs in that moment (a host thread launching kernels the synchronisation then waits for)
    makes its median longer than the reference's. An excess beyond noise (10 us plus 10% of the
    reference's median) is charged in full; below it nothing is."""
    if not pre_ref or not pre_cand:
        return 0
    ref = statistics.median(pre_ref)
    excess = statistics.median(pre_cand) - ref
    return int(excess) if excess > PRE_CALL_SLACK_NS + 0.1 * ref else 0


def clock_behind_events(pairs: list[tuple[int, float]]) -> str:
    """Why the candidate's clock cannot be right, or "": ``pairs`` are its timed rounds' (call ns by
    the worker's clock, CUDA-event us on its stream). The events are recorded inside the timed,
    synchronised call, so the GPU's interval between them cannot exceed the call by more than the
    event's launch; a median excess beyond CLOCK_BEHIND_EVENTS_SLACK_US (and _FRACTION of the event
    time) means the worker's clock was slowed or replaced (a patched harness clock, say)."""
    if not pairs:
        return ""
    excess = statistics.median(e_us - t_ns / 1e3 for t_ns, e_us in pairs)
    event = statistics.median(e_us for _, e_us in pairs)
    if excess <= max(CLOCK_BEHIND_EVENTS_SLACK_US, CLOCK_BEHIND_EVENTS_FRACTION * event):
        return ""
    clock = statistics.median(t_ns / 1e3 for t_ns, _ in pairs)
    return (f"the candidate's calls took {event:.1f} us by CUDA events on their own stream but {clock:.1f} us by the "
            f"worker's clock around them (median; {excess:.1f} us behind over {len(pairs)} timed rounds): a call "
            "cannot take less time than the work it recorded inside it, so the worker's clock was tampered with")
