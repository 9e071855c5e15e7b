"""Runtime attacks against the real judge and worker on a GPU.

The GPU counterpart of ``test_runtime_attacks.py``: each candidate under ``gpu/`` attacks one
runtime guard with the static layer switched off (``no_static_guards``), so what is checked is
that the runtime layer holds on its own. The judge's ELF-symbol check of built extensions still
runs (it lives in the judge process); the extensions here import nothing it refuses under the
policy each test uses.

Not here: an end-to-end test of the physical-floor gate (``guard physical_floor``). A candidate
that beats the floor has to fool the device-synchronised wall clock, and every way of doing that
from inside a call is caught earlier (deferred work by the sync, reused outputs by
``persistent_output``, stale results by the audits); its arithmetic, the NVML reading and the
cases where it must stay silent are unit-tested in ``tests/test_physical_floor.py``.

Run on a CUDA host: ``pytest -m gpu tests/adversarial/test_gpu_attacks.py -v``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from attack_scoring import score_attack

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.evidence import EVENT_WALL_GAP_NOTE
from evalfarm.result import ScoreResult
from evalfarm.scoring import as_task

pytestmark = pytest.mark.gpu

GPU = Path(__file__).parent / "gpu"
# 20 correctness rounds and a 1 s timing budget: a scoring is dominated by the worker's start.
QUICK = ScoreConfig(device="cuda", num_correctness_inputs=20, timing_budget_s=1.0, min_timed_rounds=35,
                    reverify_above=0.0)


@pytest.fixture(scope="module")
def relu_task(data_dir):
    # relu over 32M floats: 128 MiB in, 128 MiB out, so two rounds share one 1 GiB arena batch.
    return as_task(str(data_dir / "gpu" / "task_relu.py"))


def _score(task, source: str | Path, build_pool, **changes) -> ScoreResult:
    return score_attack(task, source, build_pool, QUICK, **changes)


def test_cuda_graph_replaying_the_first_input_is_not_ok(relu_task, build_pool):
    # The graph reads round 0's input slot; round 1 (a correctness round) has its input in
    # another slot of the same batch, so the replay returns round 0's result there.
    r = _score(relu_task, GPU / "cuda_graph_replay.py", build_pool)
    assert r.verdict in (Verdict.INCORRECT, Verdict.HACK_DETECTED), (r.verdict, r.detail)
    assert r.speedup is None


@pytest.mark.parametrize("when", ["forward", "init"])
def test_persisting_l2_set_aside_gains_nothing(relu_task, build_pool, when):
    # A set-aside in the candidate's own context is its own business; every persisting line is
    # demoted and the L2 flushed before each timed call (in both workers), so nothing it pinned
    # survives into the next call, and the reference's context is untouched.
    source = (GPU / "persisting_l2.py").read_text().replace('WHEN = "forward"', f'WHEN = "{when}"')
    assert f'WHEN = "{when}"' in source
    r = _score(relu_task, source, build_pool)
    if r.verdict in (Verdict.LOAD_ERROR, Verdict.RUNTIME_ERROR) and "cuCtxSetLimit failed" in r.detail:
        pytest.skip(f"this device refuses a persisting-L2 set-aside (MIG or MPS?): {r.detail[-300:]}")
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    assert r.speedup <= 1.15, r.evidence.timing


def test_work_left_running_on_the_gpu_does_not_slow_the_reference(relu_task, build_pool):
    # A host thread launches a long burst of GPU work right after each of the candidate's calls
    # returns (after the worker's device-wide sync). The candidate's process is stopped before
    # the reference runs, but its queued kernels would still share the device with the
    # reference's call; the reference worker waits for the device to go quiet first.
    r = _score(relu_task, GPU / "lingering_work.py", build_pool)
    assert r.verdict in (Verdict.OK, Verdict.HACK_DETECTED), (r.verdict, r.detail)
    if r.verdict is Verdict.OK:
        # Whether a burst lands depends on a race: its thread must launch it between the worker's
        # device-wide sync and the judge's SIGSTOP. A burst that landed shows as a quiet wait (on
        # the H100, some runs: gpu_quiet_wait noted; others: no burst in time); either way the
        # attack gains nothing. The wait and the blame are exercised deterministically in
        # tests/test_gpu_sharing.py.
        assert r.speedup <= 1.15, r.evidence.timing
    else:
        # Proven, not presumed: the GPU went quiet once the candidate's process was killed.
        assert "lingering_gpu_work" in r.detail and "went quiet" in r.detail, r.detail


def test_kernel_that_never_ends_is_timeout_and_the_device_recovers(relu_task, data_dir, build_pool):
    # The spin is enqueued in the very first call; the round's limit is then about
    # 2 x t_ref + min_call_timeout_s + 2 s slack + first_call_timeout_s, about 4 s.
    t0 = time.monotonic()
    r = _score(relu_task, GPU / "spin_forever.py", build_pool, first_call_timeout_s=1.0, min_call_timeout_s=1.0)
    assert r.verdict is Verdict.TIMEOUT, (r.verdict, r.detail)
    assert "did not finish round 0" in r.detail, r.detail
    assert r.speedup is None
    # Right after, on the same device: the killed worker's context (and its kernel) is gone.
    ok = _score(relu_task, data_dir / "gpu" / "cand_same.py", build_pool)
    assert ok.verdict is Verdict.OK, ok.detail
    assert 0.7 <= ok.speedup <= 1.4, ok.evidence.timing  # torch's relu against itself (short budget: loose)
    # Well inside the kernel's own 120 s safety valve: the kill, not the valve, freed the device.
    # Time spent waiting for the GPU's lease (other evaluations of a parallel test run) is not
    # this evaluation's.
    waited = sum(x.evidence.phases_s.get("gpu_lease_wait", 0.0) for x in (r, ok))
    assert time.monotonic() - t0 - waited < 100, waited


def test_side_stream_created_in_cpp_is_timed_and_the_gap_reported(relu_task, build_pool):
    # tests/test_gpu.py covers a torch.cuda.Stream in Python; this one creates its own
    # non-blocking stream with cudaStreamCreateWithFlags and returns without waiting for it.
    # Under the default policy the judge's symbol check reports the cudaStreamCreateWithFlags
    # import as evidence; the device-wide sync times the work.
    # In timed blocks (the default) the output, copied out on the current stream right after the
    # call, misses the side stream's work (an audit catches it) or the work slows the calls around
    # it: not paid either way.
    blocks = _score(relu_task, GPU / "side_stream_cpp.py", build_pool)
    assert blocks.verdict is not Verdict.OK or blocks.speedup <= 0.5, (blocks.verdict, blocks.detail)
    # With lone timed calls the device-wide sync after each call times the work.
    r = _score(relu_task, GPU / "side_stream_cpp.py", build_pool, timing_protocol="lone")
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    assert r.speedup <= 0.5, r.evidence.timing  # three relus on the side stream are timed, not free
    t = r.evidence.timing
    # how much of the work the current stream's events miss depends on the GPU's scheduling
    # (tests/test_gpu.py's side-stream test); the note fires from EVENT_WALL_GAP_NOTE up
    assert t.event_wall_gap is not None and t.event_wall_gap > 1.5, t
    noted = any(g.startswith("event_wall_gap") for g in r.evidence.guards)
    assert noted == (t.event_wall_gap > EVENT_WALL_GAP_NOTE), r.evidence.guards
    assert any(f["guard"] == "side_stream" and not f["blocking"] for f in r.evidence.static_findings)
    floor = r.evidence.physical_floor
    assert floor and not floor["violated"], floor  # 128 MiB of output: the gate ran and stayed silent


def test_side_stream_created_in_cpp_is_refused_by_the_symbol_check_under_the_paper_policy(relu_task, build_pool):
    # With the source check off, the judge's ELF check of the built extension still sees the import.
    r = _score(relu_task, GPU / "side_stream_cpp.py", build_pool, guard_policy="paper")
    assert r.verdict is Verdict.HACK_DETECTED, (r.verdict, r.detail)
    assert "side_stream" in r.detail and "cudaStreamCreateWithFlags" in r.detail, r.detail
