"""Lone calls: the timing protocol of one call per exchange (``ScoreConfig.timing_protocol`` "lone",
and every round outside a block).

The rule. Each round, in the order drawn for it, the judge asks each worker to prepare a call (poison
free memory, demote persisting L2 lines, synchronise), then writes that round's fresh inputs into the
worker's input slots, then lets the call run (the worker flushes the L2 and synchronises right before
it): the inputs reach the candidate's memory only right before its timed call starts
(``run_call``). Each call is bounded by the per-call bound (evalfarm.judge.bounds); the calls before
the first timed round share ``first_call_timeout_s`` on top of it, for lazy builds and autotuning
(``run_lone_round``).

Warm calls (``ScoreConfig.warm_call``, by default on a CPU only): before a lone timed call whose
reference runs under ``WARM_CALL_MAX_S``, both workers first call their model once, untimed, on the
first inputs they were given, before the round's inputs are written; bounded as a call is. A call
that follows the judge's exchange runs slower than one that follows another call, on both sides,
which compresses short calls' ratios (docs/security.md, "Warm calls").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evalfarm.config import ScoreConfig
from evalfarm.judge.blame import Verdicted, check_contained
from evalfarm.judge.bounds import Bounds
from evalfarm.judge.roles import CANDIDATE, REFERENCE
from evalfarm.judge.rounds import RoundPlan, check_round_result
from evalfarm.verdict import Verdict

if TYPE_CHECKING:
    from evalfarm.judge.exchange import Link

# Warm calls (ScoreConfig.warm_call): only where the reference's call is estimated under this. A
# lone call pays ~15-25 us for following the judge's exchange rather than another call, which is
# 3% of a 1 ms call; a warm call costs each worker one more call per round.
WARM_CALL_MAX_S = 1e-3

# Added to the isolation notes when the evaluation has warm calls (ScoreConfig.warm_call).
WARM_NOTE = ("each timed call whose reference is under 1 ms follows, in both workers, one untimed call of the "
             "same model on the first inputs that worker was given, made before the call's inputs are written")

# fail(role, reply, plan): a worker's failed call as its verdict (raises).
CallFailure = Callable[[str, dict[str, Any], RoundPlan | None], None]


def warm_call_wanted(warm_calls: bool, reference_call_s: float) -> bool:
    """Whether a lone round gets warm calls: where they are on and the reference's usual call is short."""
    return warm_calls and reference_call_s < WARM_CALL_MAX_S


def run_call(link: Link, role: str, plan: RoundPlan, limit: float, fail: CallFailure,
             write_roles: tuple[str, ...] | None = None) -> dict[str, Any]:
    """One timed call in one worker: prepare, then the inputs written, then go.

    The inputs of a round reach the worker's memory only after it has finished its own
    preparation (poisoning, L2 flush, synchronisation), right before the call starts, so no
    code in the candidate's process sees them outside the timed call. ``write_roles``: as
    ``Link.exchange`` takes it (ROUND_WRITE_ENV)."""
    worker = link.worker(role)
    res, go_ns, warm_ns = link.exchange(role, plan.calls[role].prepare, [plan], f"round {plan.r}", limit,
                                        write_roles=write_roles)
    res["j"] = go_ns  # the judge's own clock, never the worker's
    res["w"] = warm_ns  # the warm call before it, on the judge's clock (0: none)
    if res.get("op") != "round":
        fail(role, res, plan)
    check_round_result(res, plan.r)
    if role == CANDIDATE:
        check_contained(worker)
    return res


def run_lone_round(link: Link, bounds: Bounds, cfg: ScoreConfig, plan: RoundPlan, allowance: float,
                   fail: CallFailure) -> float:
    """One round, one call per exchange in each worker in the round's order, its times into
    ``plan.times``; TIMEOUT past the bounds. ``allowance``: what is left of the first-call
    allowance, returned less what this round used of it."""
    acc = link.phases
    warm = plan.r < max(cfg.warmup_rounds, 1)
    times: dict[str, dict[str, Any]] = {}
    order = (REFERENCE, CANDIDATE) if plan.first == REFERENCE else (CANDIDATE, REFERENCE)
    # ROUND_WRITE_ENV: both prepared ahead, so both workers' inputs go in the first exchange.
    one_write = link.switches.round_write and not plan.warm_call and link.ready >= set(order)
    for k, role in enumerate(order):
        limit = bounds.wait_bound(role)
        if role == CANDIDATE and warm:
            limit += allowance
        t_step = time.monotonic()
        times[role] = run_call(link, role, plan, limit, fail, (order if k == 0 else ()) if one_write else None)
        acc["rounds_exchange"] += time.monotonic() - t_step
        acc["rounds_calls"] += times[role]["t"] / 1e9
    t_ref, t_cand = times[REFERENCE]["t"], times[CANDIDATE]["t"]
    # A warm call (ScoreConfig.warm_call) is bounded as a call is, on the judge's clock.
    t_warm = times[CANDIDATE].get("w", 0)
    over_warm = t_warm / 1e9 - bounds.call_limit_s()
    over = t_cand / 1e9 - bounds.call_limit_s()
    if warm and max(0.0, over) + max(0.0, over_warm) > allowance:
        raise Verdicted(Verdict.TIMEOUT, f"round {plan.r}: the calls before the first timed round "
                        f"took more than the per-call bound ({bounds.call_limit_s():.3g} s) plus the "
                        f"first-call allowance ({cfg.first_call_timeout_s:g} s in all)")
    if warm:
        allowance -= max(0.0, over) + max(0.0, over_warm)
    elif over > 0:
        raise Verdicted(Verdict.TIMEOUT, f"a call took {t_cand / 1e6:.1f} ms, more than "
                        f"{cfg.timeout_factor:g}x the reference's {bounds.t_ref_est * 1e3:.3f} ms")
    elif over_warm > 0:
        raise Verdicted(Verdict.TIMEOUT, f"round {plan.r}: the untimed warm call before it took "
                        f"{t_warm / 1e6:.1f} ms, more than {cfg.timeout_factor:g}x the reference's "
                        f"{bounds.t_ref_est * 1e3:.3f} ms (warm calls are bounded as calls are)")
    bounds.note_reference_call(t_ref)
    plan.times = times
    return allowance
