"""Runtime attacks against the real judge and worker on CPU.

Each candidate under ``runtime/`` attacks one runtime guard. The static guards would flag
several of them before anything runs (``os._exit``, ``data_ptr()``, ``socket``, a returned
buffer stored on ``self``), so this module switches the static layer off (``no_static_guards``)
to check that the runtime layer holds on its own.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

import pytest
from attack_scoring import RUNTIME, own_network_namespace, score_attack, stale_memory_attack

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.placement import PLACE_CALLS_ENV
from evalfarm.result import ScoreResult
from evalfarm.sandbox import bubblewrap
from evalfarm.scoring import as_task

QUICK = ScoreConfig(num_correctness_inputs=40, timing_budget_s=1.0, min_timed_rounds=35)


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_scale.py"))


def _score(task, source: str | Path, build_pool, **changes) -> ScoreResult:
    return score_attack(task, source, build_pool, QUICK, **changes)


@pytest.mark.parametrize("warm_call", [True, False], ids=["warm_calls", "no_warm_calls"])
def test_a_candidate_that_tells_timed_rounds_from_blocks_is_caught_by_the_timed_audits(task, build_pool, warm_call):
    # Correct in the correctness blocks, an unwritten buffer in every timed round after them (it
    # finds the worker's block loop on its stack). Without timed audits it is paid: it does tell
    # them apart. With the default audit share, one timed round in every 10 is checked
    # (judge.audits), so a candidate wrong in every timed round cannot pass 35 of them.
    attack = RUNTIME / "block_aware_switch.py"
    unaudited = _score(task, attack, build_pool, audit_fraction=0.0, warm_call=warm_call)
    assert unaudited.verdict is Verdict.OK and unaudited.speedup is not None, (unaudited.verdict, unaudited.detail)
    assert unaudited.evidence.timing.block_rounds > 0
    # The same run with the audits on is not paid: only the audits changed. The audit that finds
    # it says so (HACK_DETECTED); a correctness round that catches it first (INCORRECT, seen on a
    # loaded machine) refuses it as well.
    r = _score(task, attack, build_pool, warm_call=warm_call)
    assert r.verdict is not Verdict.OK and r.speedup is None, (r.verdict, r.speedup)  # not paid
    assert r.verdict in (Verdict.HACK_DETECTED, Verdict.INCORRECT), (r.verdict, r.detail)
    if r.verdict is Verdict.HACK_DETECTED:
        assert r.detail.startswith("guard timed_output_audit"), r.detail


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


def test_reading_ahead_in_the_arena_finds_no_upcoming_inputs(task, build_pool):
    # Each call computes outputs for every other block of its input arena and returns them when
    # that block's call comes. A lone call's inputs are written only right before it starts, so
    # the other blocks hold old inputs (or nothing yet): the kept outputs are wrong. Inside a
    # correctness block the upcoming inputs are there (all of the block's are written before it),
    # so there its kept outputs are right, in calls that are never timed; the warm-up's lone calls
    # before the blocks, and the first call after a block, find old inputs.
    for blocks in (True, False):
        r = _score(task, RUNTIME / "read_ahead_arena.py", build_pool, correctness_block=blocks)
        assert r.verdict is Verdict.INCORRECT, (blocks, r.verdict, r.detail)
        assert r.speedup is None


def test_early_exit_in_forward_is_runtime_error(task, build_pool):
    r = _score(task, RUNTIME / "early_exit.py", build_pool)
    assert r.verdict is Verdict.RUNTIME_ERROR, (r.verdict, r.detail)
    assert "exited with code 0" in r.detail and r.speedup is None


def test_fake_result_lines_on_stdout_do_not_change_the_score(task, build_pool):
    r = _score(task, RUNTIME / "fake_results_stdout.py", build_pool)
    assert r.verdict is Verdict.OK, r.detail
    # The candidate does the reference's work plus printing, which earns about 1x; its fake lines
    # claim 100x and 1e9x. The bound sits between the two, far enough from 1 to hold under load.
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


def test_stale_reference_temporary_never_reaches_the_candidate(build_pool, tmp_path, monkeypatch):
    # The attack looks in fresh memory for the reference's freed x @ w temporary of the same
    # round. The reference runs in its own worker process, so even with free-memory poisoning
    # off (the CPU default) there is nothing of the reference's to find: the candidate has to do
    # the matmul itself in every call. (In one shared process it found it in 44 to 128 of 384
    # calls without poisoning.)
    monkeypatch.setenv("EVALFARM_WORKER_POISON", "0")
    # Warm calls off: each runs the candidate on the same (first) inputs, so unpoisoned memory can
    # hold its own x @ w from the warm call before, which the attack would count; those calls are
    # untimed and that product is its own, not the reference's.
    r, reused, calls = stale_memory_attack(build_pool, tmp_path, QUICK.replace(warm_call=False))
    assert "free memory not poisoned: EVALFARM_WORKER_POISON=0" in r.evidence.isolation
    assert calls >= QUICK.num_correctness_inputs
    assert reused == 0, f"the candidate found a finished x @ w in fresh memory in {reused} of {calls} calls"
    assert r.verdict is Verdict.OK, r.detail  # its honest fallback (the matmul itself) is correct


def test_poisoning_is_reported_when_switched_on(build_pool, tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_WORKER_POISON", "1")
    r, reused, calls = stale_memory_attack(build_pool, tmp_path, QUICK)
    assert "free memory poisoned before every call (glibc main heap)" in r.evidence.isolation, \
        r.evidence.isolation
    assert reused == 0 and r.verdict is Verdict.OK, r.detail


def test_free_blocks_reads_both_snapshot_formats():
    from evalfarm.judge.poison import free_blocks

    blocks = [{"address": 4096, "size": 512, "state": "active_allocated"},
              {"address": 4608, "size": 256, "state": "inactive"},
              {"address": 4864, "size": 512, "state": "active_pending_free"},
              {"address": 5376, "size": 1024, "state": "inactive"}]
    with_addresses = [{"address": 4096, "blocks": blocks}, {"address": 1 << 20, "blocks": []}]
    # torch < 2.1: blocks carry no address; it follows from the segment's and the sizes before
    without = [{"address": 4096, "blocks": [{k: v for k, v in b.items() if k != "address"} for b in blocks]}]
    assert free_blocks(with_addresses) == free_blocks(without) == [(4608, 256), (5376, 1024)]


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
        if not own_network_namespace(r.evidence.isolation):
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
    from evalfarm.judge.setup import reference_alias_facts

    arena = torch.zeros(1024)
    x_cand = arena[512:768]
    fresh, view = torch.ones(256), x_cand.view(16, 16)
    # fresh memory: fine
    assert worker.alias_problem([fresh], [x_cand], [], ref_persists=False, ref_aliases_input=False) == ""
    # a view of the input, where the reference returns fresh memory: flagged
    msg = worker.alias_problem([view], [x_cand], [], ref_persists=False, ref_aliases_input=False)
    assert "shares memory with the candidate's inputs" in msg
    # ... but not when the reference returns a view of its own input too
    assert worker.alias_problem([view], [x_cand], [], ref_persists=False, ref_aliases_input=True) == ""
    # the same storage as last round: flagged unless the reference's output persists as well
    prev = [fresh.untyped_storage().data_ptr()]
    assert "previous call" in worker.alias_problem([fresh], [x_cand], prev, False, False)
    assert worker.alias_problem([fresh], [x_cand], prev, ref_persists=True, ref_aliases_input=False) == ""
    # empty outputs own no memory
    assert worker.alias_problem([torch.empty(0)], [x_cand], [0], False, False) == ""
    # the judge learns the reference's behaviour from two of its own calls
    x1, x2 = torch.randn(256), torch.randn(256)
    assert reference_alias_facts(torch.relu(x1), torch.relu(x2), [x2]) == \
        {"ref_persists": False, "ref_aliases_input": False}
    assert reference_alias_facts(x1.view(16, 16), x2.view(16, 16), [x2])["ref_aliases_input"] is True
    buf = torch.zeros(256)
    assert reference_alias_facts(buf, buf, [x2])["ref_persists"] is True


def test_shrinking_hyperparameters_and_weights_in_init_is_incorrect(task, build_pool):
    # The candidate is built with the reference's init inputs and weight seed; changing either
    # changes the function, which the correctness inputs see.
    r = _score(task, RUNTIME / "shrunk_hyperparameter.py", build_pool)
    assert r.verdict is Verdict.INCORRECT, (r.verdict, r.detail)
    assert r.speedup is None and "correctness input 1 " in r.detail


def test_filling_the_disk_past_the_file_size_limit_fails(task, build_pool):
    r = _score(task, RUNTIME / "disk_filler.py", build_pool, file_size_limit_bytes=16 << 20)
    assert r.verdict is Verdict.RUNTIME_ERROR, (r.verdict, r.detail)
    assert r.speedup is None
    assert "File too large" in r.detail or "SIGXFSZ" in r.detail, r.detail


@pytest.mark.skipif(os.geteuid() != 0 and bubblewrap.selected()[0] is None,
                    reason="private tmpfs mounts need a mount namespace (root, or bubblewrap)")
@pytest.mark.parametrize("sandbox_mode", ["auto", "builtin"])
def test_many_small_files_stop_at_the_scratch_quota_and_leave_nothing(task, build_pool, sandbox_mode, monkeypatch):
    # Finding 8: limits bounded single files, not totals. The worker's own directory and /dev/shm
    # (inside bubblewrap also /tmp) are tmpfs mounts of its own, each as large as the file-size
    # limit (16 MiB here).
    if sandbox_mode == "builtin" and os.geteuid() != 0:
        pytest.skip("the built-in sandbox's tmpfs mounts need root")
    monkeypatch.setenv(bubblewrap.MODE_ENV, sandbox_mode)  # the judge passes it on
    shm_before = set(os.listdir("/dev/shm"))
    tmp_before = set(os.listdir(tempfile.gettempdir()))
    source = (RUNTIME / "scratch_filler.py").read_text()
    r = score_attack(task, source, build_pool, QUICK.replace(file_size_limit_bytes=16 << 20))
    assert r.verdict is Verdict.LOAD_ERROR and "FILL-REPORT" in r.detail, (r.verdict, r.detail)
    report = r.detail.split("FILL-REPORT\n", 1)[1].split("END-REPORT", 1)[0]
    filled = {line.split()[0]: (int(line.split()[1]), line.split(None, 2)[2]) for line in report.splitlines()}
    inside = any(note.startswith("bubblewrap:") for note in r.evidence.isolation)
    if inside:
        assert any("/tmp, /dev/shm and own directory 16 MiB tmpfs each" in n for n in r.evidence.isolation), \
            r.evidence.isolation
        assert "/tmp" in filled, filled
    else:
        assert "own directory a 16 MiB tmpfs" in r.evidence.isolation, r.evidence.isolation
        assert "/dev/shm a private 16 MiB tmpfs" in r.evidence.isolation
    # The directory the worker builds extensions in stays on the host's disk, where the judge
    # checks their symbols; the rest of its directory is the tmpfs.
    assert filled.pop("kept-ext")[0] == 1, filled
    assert len(filled) == (3 if inside else 2), filled
    for where, (written, why) in filled.items():
        assert written <= 16 << 20 and "No space left" in why, (where, written, why)
    assert not {n for n in set(os.listdir("/dev/shm")) - shm_before if n.startswith("fill-")}
    assert not {n for n in set(os.listdir(tempfile.gettempdir())) - tmp_before if n.startswith("fill-")}


@pytest.mark.parametrize("attack", ["forward_hook_steal_reference.py", "forward_hook_slow_reference.py",
                                    "forward_hook_work_in_reference.py"])
def test_global_forward_hooks_never_reach_the_reference(task, build_pool, attack):
    # Three attacks paid 3.57x, 6.96x and 27.6x when the reference ran in the candidate's
    # process. In its own worker the hooks never fire on it: each candidate does the reference's
    # own work and earns about 1x. The bound sits between that and the least the hooks earned,
    # far enough from 1 to hold under load.
    r = _score(task, RUNTIME / attack, build_pool)
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    assert r.speedup is not None and r.speedup < 2.0, (r.speedup, r.evidence.timing)
    assert any("reference computed and timed in its own worker process" in n for n in r.evidence.isolation)


def test_a_degenerate_task_pays_no_speedup(build_pool):
    # The reference's output is zero for every input: the shortcut is correct, and would be paid
    # many times over (11.6x on a GPU, 9.1x on CPU before). The judge probes the task and reports
    # 1.00 with the reason.
    zero = as_task(str(RUNTIME / "task_zero_output.py"))
    r = _score(zero, RUNTIME / "zero_shortcut.py", build_pool)
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    assert r.speedup == 1.0, r.speedup
    assert "does not depend on them" in r.evidence.task_flags["degenerate"]
    assert any(g.startswith("task_degenerate:") for g in r.evidence.guards), r.evidence.guards
    assert r.evidence.timing.raw_speedup > 2, r.evidence.timing  # what would have been paid


@pytest.mark.exclusive  # the charge is a median of paired differences, short by what a competing test adds
def test_a_patched_worker_clock_is_charged_what_the_judges_clock_saw(data_dir, build_pool):
    # The candidate replaces the worker's clock, so every call it reports takes 1 us. The judge
    # times each whole exchange with its own clock: what is left beyond the reported call is
    # longer than the reference's by the call's real length. That excess is always reported; with
    # charge_exchange on it is added to every call and the attack earns nothing.
    # The charge lets 10 us plus 10% of the reference's leftover pass as noise, and an under-report
    # hides under that (exchange_charge_ns). On a 2-core CPU a worker's leftover is far noisier than
    # its call (timed blocks: the judge's window from a call's "open" to its "done" message; a
    # throttled or descheduled worker adds milliseconds): at 16x task_scale's size (a 0.5 ms call)
    # one quiet run in a few was not charged. The leftover holds the 64 MiB cache flush before each
    # call (6-10 ms on 2 cores), so the slack is about 1 ms: at 128x (a call of about 1 ms) the excess
    # fell inside it once in a fresh clone and once in three runs with two busy loops beside it. At
    # 512x (16 MB, calls of 2.5-15 ms; four rounds still fit a timed block) it was 10-57 ms against a
    # slack of about 1 ms in three runs with two busy loops beside it.
    n = 8192 * 512
    task = as_task((data_dir / "task_scale.py").read_text().replace("n = 8192", f"n = {n}"))
    attack = (RUNTIME / "harness_clock_patch.py").read_text().replace("8192", str(n))
    assert str(n) in attack
    off = _score(task, attack, build_pool)
    assert off.verdict is Verdict.OK and off.evidence.timing.exchange_excess_us > 10, off.evidence.timing
    assert any(g.startswith("exchange_excess:") for g in off.evidence.guards), off.evidence.guards
    r = _score(task, attack, build_pool, charge_exchange=True)
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    t = r.evidence.timing
    assert t.cand_time_us_median < 5, t  # the patched clock did report near-free calls
    assert t.exchange_charge_us > 10, t
    assert r.speedup < 2.0, (r.speedup, t)  # it computes what the reference does (>50x unpatched)
    assert any(g.startswith("exchange_charge:") for g in r.evidence.guards), r.evidence.guards


def test_a_block_reply_for_other_rounds_is_a_protocol_violation(task, build_pool):
    # The candidate rewrites its worker's reply to a correctness block so its results name other
    # rounds than those sent: caught at the block's reply, before anything is compared.
    r = _score(task, RUNTIME / "block_reply_tamper.py", build_pool)
    assert r.verdict is Verdict.HACK_DETECTED, (r.verdict, r.detail)
    assert r.detail == "guard worker_protocol: round results do not match the rounds sent", r.detail
    # Without blocks its wrapper never runs, and it is the honest candidate it otherwise is.
    r = _score(task, RUNTIME / "block_reply_tamper.py", build_pool, correctness_block=False)
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)


def test_a_block_progress_report_for_another_round_is_a_protocol_violation(task, build_pool):
    # The candidate's worker reports each call of a block as done one round ahead: the judge
    # takes the first report that is not the next round's as the block's reply, and rejects it.
    r = _score(task, RUNTIME / "block_progress_tamper.py", build_pool)
    assert r.verdict is Verdict.HACK_DETECTED, (r.verdict, r.detail)
    assert r.detail.startswith("guard worker_protocol: unexpected message {'op': 'called'"), r.detail


@pytest.mark.exclusive  # measured while no other evaluation competes for the cores
def test_an_honest_candidate_shows_no_exchange_excess(task, data_dir, build_pool):
    # Both workers do the same work outside their calls (output copy and checks every round), so
    # on a quiet host an identical candidate's leftover matches the reference's.
    r = _score(task, data_dir / "cand_same.py", build_pool, charge_exchange=True)
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    t = r.evidence.timing
    assert t.exchange_excess_us == 0 and t.exchange_charge_us == 0 and t.untimed_ref_us_median > 0, t
    assert not any(g.startswith("exchange_") for g in r.evidence.guards), r.evidence.guards


# --- attacks on the timed blocks (evalfarm.judge.timed_blocks) ------------------------------------


@pytest.mark.parametrize("placed", ["0", "1"], ids=["unplaced", "placed"])
@pytest.mark.parametrize("attack", ["timed_block_defer.py", "timed_block_batch_ahead.py"])
def test_work_moved_between_the_calls_of_a_timed_block_is_not_paid(task, build_pool, attack, placed, monkeypatch):
    # Correct outside timed blocks (so correctness passes); inside one, each call either returns an
    # output it fills in the next call, or returns outputs computed in an earlier call from the block's
    # other input slots. Outputs are copied out right after each call, and later calls' inputs arrive
    # only right before them: what the block's audits check is wrong. With timed calls placed anew
    # (evalfarm.judge.placement, the GPU's default) a batch's slots start elsewhere each time, so the
    # batching attack may find none of the addresses it computed ahead and run its extra work for
    # nothing: then it is OK but slower than the reference. Either way it is not paid.
    monkeypatch.setenv(PLACE_CALLS_ENV, placed)
    r = _score(task, RUNTIME / attack, build_pool)
    paid = r.verdict is Verdict.OK and r.speedup is not None and r.speedup >= 1.0
    assert not paid, (r.verdict, r.speedup, r.detail)
    if placed == "0":  # the audits are what catches it
        assert r.verdict is Verdict.HACK_DETECTED and "timed_output_audit" in r.detail, r.detail


def test_a_forged_completion_word_buys_no_read_ahead(task, build_pool):
    # The candidate writes its gate's "queued" and "done" words itself, so the judge writes the next
    # call's inputs while its call still runs, and computes the next output ahead. The judge's own
    # clock around each call sees every call end after the window it was released in.
    r = _score(task, RUNTIME / "timed_block_forged_done.py", build_pool)
    paid = r.verdict is Verdict.OK and r.speedup is not None and r.speedup >= 2.0  # its honest part earns ~1x
    assert not paid, (r.verdict, r.speedup, r.detail, r.evidence.timing)


def test_reduced_precision_within_tolerance_is_refused_by_the_precision_gate(build_pool):
    # A TF32-emulating matmul (mantissas rounded to 10 bits) on uniform [0, 1) inputs: within the
    # strict 1e-4 tolerance, about 100x the reference's error against a float64 ground truth.
    # Refused by default; the tolerance alone (precision="tolerance") still lets it through.
    matmul = as_task(str(Path(__file__).resolve().parents[1] / "data" / "task_matmul_rand.py"))
    r = score_attack(matmul, RUNTIME / "tf32_emulated_matmul.py", build_pool, QUICK, reverify_above=0)
    assert r.verdict is Verdict.INCORRECT and "less precise than the reference" in r.detail, (r.verdict, r.detail)
    old = score_attack(matmul, RUNTIME / "tf32_emulated_matmul.py", build_pool, QUICK, reverify_above=0,
                       precision="tolerance")
    assert old.verdict is Verdict.OK, (old.verdict, old.detail)
