"""Runtime attacks against the real judge and worker on CPU.

Each candidate under ``runtime/`` attacks one runtime guard. The static guards would flag
several of them before anything runs (``os._exit``, ``data_ptr()``, ``socket``, a returned
buffer stored on ``self``), so this module switches the static layer off (``no_static_guards``)
to check that the runtime layer holds on its own.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.result import ScoreResult
from evalfarm.scoring import as_candidate, as_task, score

RUNTIME = Path(__file__).parent / "runtime"
QUICK = ScoreConfig(num_correctness_inputs=40, timing_budget_s=1.0, min_timed_rounds=35)


@pytest.fixture(autouse=True)
def no_static_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exercise the runtime guards alone: the static check finds nothing."""
    monkeypatch.setattr("evalfarm.scoring.check_candidate_source", lambda *args, **kwargs: [])


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_scale.py"))


def _score(task, source: str | Path, build_pool, **changes) -> ScoreResult:
    cfg = QUICK.replace(**changes) if changes else QUICK
    candidate = as_candidate(str(source)) if isinstance(source, Path) else as_candidate(source)
    return score(task, candidate, cfg, build_pool=build_pool)


def test_cache_keyed_by_input_pointer_is_not_ok(task, build_pool):
    # Arena offsets repeat across batches with fresh values, so the cache hands back stale outputs.
    r = _score(task, RUNTIME / "cache_by_pointer.py", build_pool)
    assert r.verdict in (Verdict.INCORRECT, Verdict.HACK_DETECTED), (r.verdict, r.detail)
    assert r.speedup is None


def test_switching_to_zeros_after_correctness_is_caught_by_timed_audit(task, build_pool):
    # 60 honest calls cover the 40 correctness rounds; a half audit rate makes missing every
    # one of the remaining >= 30 wrong rounds practically impossible (< 1e-9).
    r = _score(task, RUNTIME / "late_switch.py", build_pool, audit_fraction=0.5)
    assert r.verdict is Verdict.HACK_DETECTED, (r.verdict, r.detail)
    assert "timed_output_audit" in r.detail


def test_early_exit_in_forward_is_runtime_error(task, build_pool):
    r = _score(task, RUNTIME / "early_exit.py", build_pool)
    assert r.verdict is Verdict.RUNTIME_ERROR, (r.verdict, r.detail)
    assert "exited with code 0" in r.detail and r.speedup is None


def test_fake_result_lines_on_stdout_do_not_change_the_score(task, build_pool):
    r = _score(task, RUNTIME / "fake_results_stdout.py", build_pool)
    assert r.verdict is Verdict.OK, r.detail
    # The candidate does the reference's work plus printing: never a large speedup.
    assert r.speedup is not None and r.speedup < 2.0, r.evidence.timing
    assert r.evidence.isolation, "the worker reports what isolation it obtained"


def test_persistent_output_buffer_is_hack_detected(task, build_pool):
    r = _score(task, RUNTIME / "persistent_output.py", build_pool)
    assert r.verdict is Verdict.HACK_DETECTED, (r.verdict, r.detail)
    assert r.detail.startswith("guard persistent_output:") and "previous call" in r.detail


def test_output_aliasing_its_input_is_hack_detected(task, build_pool):
    r = _score(task, RUNTIME / "output_aliases_input.py", build_pool)
    assert r.verdict is Verdict.HACK_DETECTED, (r.verdict, r.detail)
    assert "guard persistent_output" in r.detail and "inputs" in r.detail


def test_constant_output_on_tiny_task_is_incorrect_even_under_kernelbench(build_pool):
    tiny = as_task(str(RUNTIME / "task_tiny.py"))
    r = _score(tiny, RUNTIME / "tiny_constant.py", build_pool, tolerance="kernelbench")
    assert r.verdict is Verdict.INCORRECT, (r.verdict, r.detail)
    assert "output is constant (all 0.0) while the reference varies" in r.detail


def test_memory_hog_fails_without_hanging(task, build_pool):
    t0 = time.monotonic()
    r = _score(task, RUNTIME / "memory_hog.py", build_pool, memory_limit_bytes=4 << 30)
    assert r.verdict in (Verdict.RUNTIME_ERROR, Verdict.LOAD_ERROR, Verdict.TIMEOUT), (r.verdict, r.detail)
    assert r.speedup is None
    assert time.monotonic() - t0 < 120


def test_network_connection_from_forward_fails_in_the_namespace(task, build_pool):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        source = (RUNTIME / "network_connect.py").read_text().replace("PORT = 0", f"PORT = {port}")
        r = _score(task, source, build_pool)
        if "network namespace" not in r.evidence.isolation:
            pytest.skip(f"no network namespace on this machine: {r.evidence.isolation or r.detail}")
        try:
            conn, _ = server.accept()
            conn.close()
            reached = True
        except TimeoutError:
            reached = False
    assert not reached, "the candidate reached a port on the host's loopback"
    assert r.verdict is Verdict.RUNTIME_ERROR, (r.verdict, r.detail)
    assert "unreachable" in r.detail.lower() or "errno" in r.detail.lower(), r.detail


def test_alias_problem_allows_what_the_reference_does_too():
    import torch

    from evalfarm.judge import worker

    worker.Tensor = torch.Tensor
    arena = torch.zeros(1024)
    x_ref, x_cand = arena[:256], arena[512:768]
    fresh, view = torch.ones(256), x_cand.view(16, 16)
    # fresh memory: fine
    assert worker.alias_problem([fresh], [x_cand], [], [torch.ones(256)], [x_ref], []) == ""
    # a view of the input, where the reference returns fresh memory: flagged
    msg = worker.alias_problem([view], [x_cand], [], [torch.ones(256)], [x_ref], [])
    assert "shares memory with the candidate's inputs" in msg
    # ... but not when the reference returns a view of its own input too
    assert worker.alias_problem([view], [x_cand], [], [x_ref.view(16, 16)], [x_ref], []) == ""
    # the same storage as last round: flagged unless the reference's output persists as well
    prev = [fresh.untyped_storage().data_ptr()]
    ref_out = torch.ones(256)
    assert "previous call" in worker.alias_problem([fresh], [x_cand], prev, [ref_out], [x_ref], [])
    ref_prev = [ref_out.untyped_storage().data_ptr()]
    assert worker.alias_problem([fresh], [x_cand], prev, [ref_out], [x_ref], ref_prev) == ""
    # empty outputs own no memory
    assert worker.alias_problem([torch.empty(0)], [x_cand], [0], [torch.ones(1)], [x_ref], []) == ""
