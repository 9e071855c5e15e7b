"""Correctness rounds: every output checked against the reference's, the later ones in blocks.

The rule. Every correctness round is audited (evalfarm.judge.audits). The first
``max(warmup_rounds, 1)`` keep the one-call protocol (evalfarm.judge.lone_calls) and share the
first-call allowance; with ``ScoreConfig.correctness_block`` (on by default) the rest run a batch at
a time, one exchange per worker per batch (``run_block``), where a batch holds at least
``min_block_rounds`` rounds, since the exchange costs more than a small kernel's call (about 2.3 ms
per call on an H100). A block's inputs are all written before it starts, so its times are never
used for the score, which comes from the timed rounds after correctness; every output is still
checked, and every call is bounded by the per-call bound on the judge's clock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evalfarm.config import ScoreConfig
from evalfarm.judge.blame import Verdicted, check_contained
from evalfarm.judge.bounds import Bounds
from evalfarm.judge.lone_calls import CallFailure
from evalfarm.judge.roles import CANDIDATE, REFERENCE
from evalfarm.judge.rounds import RoundPlan, block_messages, block_results
from evalfarm.verdict import Verdict

if TYPE_CHECKING:
    from evalfarm.judge.exchange import Link
    from evalfarm.judge.reference_memo import MemoRounds

# Correctness blocks only where a batch holds at least this many rounds (tasks whose inputs and
# outputs are small). A block saves all but one of its exchanges per worker, but its rounds give
# no timing samples, which the one-call correctness rounds do. On an H100, L1/1 at its default
# size (256 MiB per round, 2 rounds per batch) spent 6.5 s on 1000 correctness inputs in blocks
# against 7.3 s without, and its fast variants then needed the whole timing budget for samples the
# correctness rounds had given before (docs/benchmarks.md, "Correctness blocks").
MIN_BLOCK_ROUNDS = 8
# With timed blocks the correctness rounds give no timing samples whichever way they run, so a
# block pays wherever it replaces more than one exchange per worker: L1/1 at its default size (4
# rounds per batch on an H200) spent 4.5 s of its 5.4 s of correctness in one-call exchanges.
MIN_BLOCK_ROUNDS_TIMED = 2


def min_block_rounds(timed: bool) -> int:
    """The fewest rounds per batch for correctness blocks: fewer with timed blocks, whose correctness
    rounds are never timing samples."""
    return MIN_BLOCK_ROUNDS_TIMED if timed else MIN_BLOCK_ROUNDS


# Added to the isolation notes when the evaluation has correctness blocks.
BLOCK_NOTE = ("correctness rounds after the warm-up run in blocks (one exchange per worker per batch of "
              "rounds): a block's inputs are all written before it starts, so its times are never used "
              "for the score; every output is checked")


def correctness_block_rounds(cfg: ScoreConfig) -> range:
    """The rounds that run in correctness blocks: the correctness rounds after the warm-up (whose
    calls keep the one-call protocol and share the first-call allowance); none when off."""
    return range(max(cfg.warmup_rounds, 1), cfg.num_correctness_inputs) if cfg.correctness_block else range(0)


class BlockLog:
    """How each correctness block went for each worker, kept as evidence (``TimingEvidence.blocks``)
    and never used for the score: the mean call and the mean leftover per round (the judge's go to
    reply beyond the calls) of both workers' blocks, and their ratio split by which worker's block
    ran first. For an identical copy both should match; a ratio that depends on the order shows
    the second block of a batch running under other conditions than the first. A block whose
    reference rounds were all kept from an earlier candidate (evalfarm.judge.reference_memo) has the
    candidate's figures only; one the reference ran in part counts for neither side's reference
    figures nor the ratio."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, dict[str, int], dict[str, int]]] = []

    def add(self, first: str, n: int, call_ns: dict[str, int], leftover_ns: dict[str, int]) -> None:
        self.rows.append((first, n, call_ns, leftover_ns))

    def summary(self) -> dict[str, Any] | None:
        """Medians over the blocks, in microseconds per round; None without blocks."""
        if not self.rows:
            return None

        def med(values: list[float]) -> float | None:
            return round(statistics.median(values), 3) if values else None

        out: dict[str, Any] = {"count": len(self.rows)}
        for role in (REFERENCE, CANDIDATE):
            out[f"call_us_{role}"] = med([c[role] / n / 1e3 for _, n, c, _ in self.rows if role in c])
            out[f"leftover_us_{role}"] = med([lo[role] / n / 1e3 for _, n, _, lo in self.rows if role in lo])
            ratios = [c[REFERENCE] / c[CANDIDATE] for first, _, c, _ in self.rows
                      if first == role and REFERENCE in c and c[CANDIDATE] > 0]
            out[f"ref_over_cand_{role}_first"] = med(ratios)
            out[f"blocks_{role}_first"] = len(ratios)
        return out


def run_block(link: Link, bounds: Bounds, cfg: ScoreConfig, plans: list[RoundPlan], block_log: BlockLog,
              fail: CallFailure, before_candidate: Callable[[], None] | None = None,
              memo: MemoRounds | None = None) -> None:
    """A batch of correctness rounds as one block per worker (``ScoreConfig.correctness_block``).

    Each worker runs all of the batch's calls in one exchange (``run_block_calls``), the two
    workers in an order drawn per block, instead of one exchange per call: the exchange (two
    round trips, four stop/continue signals, synchronisations across three CUDA contexts)
    costs more than a small kernel's call. Why the guarantees hold:

    * a block's inputs are all in the candidate's memory from before its first call to after
      its last, so it could read ahead and start on later rounds early; that can only speed
      up calls whose times are never used for the score (block rounds are checked, never timed);
      writing into them is caught as writing into its own input is (the input check after
      the batch, and outputs compared with the reference's for the judge's pristine copy);
    * every output is still compared against the reference worker's output for the same input
      (block rounds are correctness rounds: all audited, after the batch as before);
    * the reference and the candidate still run in separate processes, the candidate's
      stopped while the reference's block runs;
    * output slots are still poisoned (NaN) before their round, and every call is preceded by
      the same preparation (free memory poisoned, L2 reset, synchronisation) and followed by the
      same structure, aliasing and persistence checks as a lone call;
    * a candidate that counts its calls could always tell correctness rounds from timed ones;
      behaving differently in the timed rounds is what their audits catch, blocks or not.

    Bounded twice: each call by the per-call bound, from the worker's reported times, and on
    the judge's clock, from the "called" message the worker sends after each call but the last
    (a hung call ends the block at its own bound).

    ``before_candidate``: the reference's block runs first, and this is called between the two
    (the previous batch's audits finished there: evalfarm.judge.audit_overlap).

    ``memo``: a task window's kept reference outputs (evalfarm.judge.reference_memo). The reference
    worker then runs only the rounds it holds no copy of (none: no reference block at all), and
    copies of what it ran are kept for the window's later candidates."""
    first = REFERENCE if before_candidate is not None else plans[0].first
    ran = plans if memo is None else memo.split(plans)  # the rounds the reference worker runs
    ran_ids = {id(plan) for plan in ran}
    for plan in plans:
        # whose block ran first (what a saved structure failure looks at)
        plan.first = first if id(plan) in ran_ids else CANDIDATE
    results: dict[str, list[dict[str, Any]]] = {}
    call_ns: dict[str, int] = {}
    leftover_ns: dict[str, int] = {}
    for role in ((REFERENCE, CANDIDATE) if first == REFERENCE else (CANDIDATE, REFERENCE)):
        if role == CANDIDATE and before_candidate is not None:
            before_candidate()
        todo = plans if role == CANDIDATE else ran
        if not todo:
            continue
        t_step = time.monotonic()
        results[role], go_ns = run_block_calls(link, role, todo, bounds.wait_bound(role), fail)
        link.phases["rounds_exchange"] += time.monotonic() - t_step
        call_ns[role] = sum(res["t"] for res in results[role])
        leftover_ns[role] = go_ns - call_ns[role]
        link.phases["rounds_calls"] += call_ns[role] / 1e9
        if role == REFERENCE:
            for k, plan in enumerate(ran):
                plan.times[REFERENCE] = results[REFERENCE][k]
            if memo is not None:  # kept at once: a candidate that fails in this block spoils nothing
                memo.keep(ran)
    if len(ran) == len(plans):
        block_log.add(first, len(plans), call_ns, leftover_ns)
    elif not ran:  # the reference's rounds were all kept: the candidate's figures alone
        block_log.add(CANDIDATE, len(plans), call_ns, leftover_ns)
    for k, plan in enumerate(plans):  # in round order, as lone calls are checked
        plan.times[CANDIDATE] = results[CANDIDATE][k]
        t_cand = plan.times[CANDIDATE]["t"]
        if t_cand / 1e9 > bounds.call_limit_s():
            raise Verdicted(Verdict.TIMEOUT, (
                f"correctness round {plan.r} (in a block): a call took {t_cand / 1e6:.1f} ms, more than the "
                f"per-call bound of {bounds.call_limit_s():.3g} s ({cfg.timeout_factor:g}x the reference's "
                f"{bounds.t_ref_est * 1e3:.3f} ms, at least {cfg.min_call_timeout_s:g} s)"))
        bounds.note_reference_call(plan.times[REFERENCE]["t"])


def run_block_calls(link: Link, role: str, plans: list[RoundPlan], per_call: float,
                    fail: CallFailure) -> tuple[list[dict[str, Any]], int]:
    """One worker's part of a correctness block: prepare_block (the first call's preparation),
    then every round's inputs written, then go; the worker runs the rounds in order and replies
    once. Returns the per-round results, checked against the rounds sent, and the judge's
    nanoseconds from go to reply."""
    worker = link.worker(role)
    rounds = [plan.r for plan in plans]
    span = f"correctness rounds {rounds[0]} to {rounds[-1]}" if len(rounds) > 1 else f"correctness round {rounds[0]}"
    message = {"op": "prepare_block", "rounds": block_messages(plans, role)}
    # On the judge's clock, call by call (the worker says "called" after each but the last): a
    # call that hangs is killed at the per-call bound, as TIMEOUT (the candidate) or
    # INFRA_ERROR (the reference).
    n = len(plans)
    whats = [f"correctness round {r} (call {k + 1} of a block of {n}, at most {per_call:.3g} s)"
             for k, r in enumerate(rounds)]
    res, go_ns, _ = link.exchange(role, message, plans, whats[-1], per_call,
                               list(zip(rounds[:-1], whats, strict=False)), preparing=span)
    if res.get("op") != "block":
        fail(role, res, next((plan for plan in plans if plan.r == res.get("round")), None))
    results = block_results(res, rounds)
    if role == CANDIDATE:
        check_contained(worker)
    return results, go_ns
