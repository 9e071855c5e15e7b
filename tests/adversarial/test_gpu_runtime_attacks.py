"""Runtime attacks on CUDA (``pytest -m gpu``): the free-memory poisoning on the caching allocator.

The same stale-memory attack as ``test_runtime_attacks.py`` runs against torch's CUDA caching
allocator, which hands a freed block of the same size straight back on the same stream. The
static layer is switched off so the runtime guard is tested alone.
"""

from __future__ import annotations

import pytest
from attack_scoring import stale_memory_attack

from evalfarm import ScoreConfig, Verdict

pytestmark = pytest.mark.gpu

CFG = ScoreConfig(device="cuda", num_correctness_inputs=40, timing_budget_s=2.0, min_timed_rounds=35,
                  reverify_above=0)


def test_stale_reference_temporary_is_poisoned_on_cuda(build_pool, tmp_path, monkeypatch):
    monkeypatch.delenv("EVALFARM_WORKER_POISON", raising=False)  # the default: on for CUDA
    r, reused, calls = stale_memory_attack(build_pool, tmp_path, CFG)
    assert "free memory poisoned before every call (cuda caching allocator)" in r.evidence.isolation, \
        r.evidence.isolation
    assert calls >= CFG.num_correctness_inputs
    assert reused == 0, f"the candidate found a finished x @ w in fresh memory in {reused} of {calls} calls"
    assert r.verdict is Verdict.OK, r.detail
    assert r.speedup is not None and r.speedup < 1.5, r.evidence.timing


def test_stale_reference_temporary_never_reaches_the_candidate_on_cuda(build_pool, tmp_path, monkeypatch):
    # With poisoning off, the caching allocator once handed the reference's freed x @ w to the
    # candidate when both ran in one process. The reference now runs in its own worker (its own
    # CUDA context and allocator), so there is nothing of it to find.
    monkeypatch.setenv("EVALFARM_WORKER_POISON", "0")
    r, reused, calls = stale_memory_attack(build_pool, tmp_path, CFG)
    assert "free memory not poisoned: EVALFARM_WORKER_POISON=0" in r.evidence.isolation
    assert reused == 0, f"the candidate found a finished x @ w in fresh memory in {reused} of {calls} calls"
    assert r.verdict is Verdict.OK, r.detail


def test_a_patched_harness_clock_is_caught_by_the_events_inside_its_calls(data_dir, build_pool):
    # The worker's clock replaced by one that barely moves: every call reports 1 us. At task_scale's
    # own size the real call is shorter than the exchange charge's noise allowance, so the judge's
    # clock alone let it through (141x on an H200, static rules off). The CUDA events recorded
    # inside each call on its stream still see the real work: the clock cannot be behind them.
    from attack_scoring import score_attack

    from evalfarm.scoring import as_task

    task = as_task(str(data_dir / "task_scale.py"))
    attack = data_dir.parent / "adversarial" / "runtime" / "harness_clock_patch.py"
    # With lone timed calls the worker's clock times each call (the events inside it check it).
    r = score_attack(task, attack, build_pool, CFG, timing_protocol="lone")
    assert r.verdict is Verdict.HACK_DETECTED, (r.verdict, r.speedup, r.detail)
    assert r.detail.startswith("guard clock_behind_events:"), r.detail
    # In timed blocks (the default) the events are the call's time and the patched clock times
    # nothing: the candidate does the reference's work and earns about 1x (not paid).
    r = score_attack(task, attack, build_pool, CFG)
    assert r.verdict is not Verdict.OK or r.speedup < 2.0, (r.verdict, r.speedup, r.detail)
    # The honest twin of the same task is not.
    honest = score_attack(task, data_dir / "cand_same.py", build_pool, CFG)
    assert honest.verdict is Verdict.OK, (honest.verdict, honest.detail)
