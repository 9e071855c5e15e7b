"""The candidate worker's address-space limit counts from what its start-up mapped (evalfarm.sandbox)."""

from __future__ import annotations

import mmap
import subprocess
import sys
import textwrap

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.sandbox import address_space_limit, mapped_bytes
from evalfarm.scoring import as_candidate, as_task, score


def test_mapped_bytes_follows_the_process_mappings():
    before = mapped_bytes()
    region = mmap.mmap(-1, 512 << 20, prot=mmap.PROT_READ)
    try:
        grown = mapped_bytes() - before
    finally:
        region.close()
    assert before > 0
    assert grown >= 500 << 20, grown
    total, note = address_space_limit(1 << 30)
    assert total >= mapped_bytes() + (1 << 30) - (64 << 20)
    assert "1024 MiB beyond the" in note


# A process that mapped a lot before its limit (as a CUDA build of torch does at import), then
# starts OpenMP-sized thread pools and allocates: with a fixed limit below what is already mapped
# the threads cannot get their stacks; with the limit counted from the start-up mapping they can.
_CHILD = textwrap.dedent("""
    import mmap, resource, sys, threading
    from evalfarm.sandbox import address_space_limit, mapped_bytes
    reserved = mmap.mmap(-1, 6 << 30, prot=mmap.PROT_READ)  # libraries' worth of address space
    if sys.argv[1] == "fixed":
        limit = mapped_bytes() + (64 << 20)  # a fixed cap that start-up already nearly used up
    else:
        limit, _ = address_space_limit(1 << 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        threads = [threading.Thread(target=lambda: bytearray(8 << 20)) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        block = bytearray(256 << 20)
    except (RuntimeError, MemoryError) as err:
        print("failed:", type(err).__name__, err)
        sys.exit(3)
    print("ok")
""")


@pytest.mark.parametrize("mode, code", [("fixed", 3), ("relative", 0)])
def test_threads_and_memory_fit_a_limit_counted_from_start_up(mode, code):
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, timeout=60)
    assert out.returncode == code, out.stdout + out.stderr


def test_the_worker_reports_its_address_space_limit(data_dir, build_pool):
    cfg = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.5, min_timed_rounds=14)
    r = score(as_task(str(data_dir / "task_scale.py")), as_candidate(str(data_dir / "cand_same.py")), cfg,
              build_pool=build_pool)
    assert r.verdict is Verdict.OK, r.detail
    notes = [n for n in r.evidence.isolation if n.startswith("address space limit")]
    assert notes and "16384 MiB beyond the" in notes[0], r.evidence.isolation
