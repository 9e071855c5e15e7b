"""GPU-only tests: inline CUDA, faults that must leave the farm healthy, the timing protocol.

Run on a CUDA host: ``pytest -m gpu -v``.
"""

from __future__ import annotations

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.evidence import EVENT_WALL_GAP_NOTE
from evalfarm.scoring import as_candidate, as_task, score

pytestmark = pytest.mark.gpu

CFG = ScoreConfig(device="cuda", num_correctness_inputs=200, timing_budget_s=5.0)


@pytest.fixture(scope="module")
def relu_task(data_dir):
    return as_task(str(data_dir / "gpu" / "task_relu.py"))


def _score(task, data_dir, name, pool, **changes):
    return score(task, as_candidate(str(data_dir / "gpu" / name)), CFG.replace(**changes), build_pool=pool)


def test_inline_cuda_candidate_builds_for_the_device_arch_and_scores(relu_task, data_dir, build_pool):
    import torch

    r = _score(relu_task, data_dir, "cand_cuda_relu.py", build_pool)
    assert r.verdict is Verdict.OK, r.detail
    major, minor = torch.cuda.get_device_capability(0)
    assert r.evidence.build["arch"] == f"sm_{major}{minor}"
    assert r.evidence.inputs_on_device
    assert 0.3 < r.speedup < 1.6  # a plain one-element-per-thread kernel: near torch's, not far off
    assert r.evidence.device_name.startswith("NVIDIA")
    # 128 MiB of output: the physical-floor gate ran, from NVML's peak, and honest work is above it.
    floor = r.evidence.physical_floor
    assert floor and not floor["violated"], floor
    if floor["output_bytes"] > 2 * floor["l2_bytes"]:
        assert floor["applied"], floor
        assert 0 < floor["floor_us"] < r.evidence.timing.cand_time_us_median, floor


def test_own_kernels_share_of_gpu_time(relu_task, data_dir, build_pool):
    """The evidence says how much of one profiled call's GPU time ran in the candidate's own
    extensions' kernels (evalfarm.judge.extension_facts): all of it for the inline relu; none for a
    candidate whose broken extension's build failure it caught, running torch.relu instead (its
    other extension loaded and never called)."""
    r = _score(relu_task, data_dir, "cand_cuda_relu.py", build_pool, num_correctness_inputs=50, timing_budget_s=1.0)
    assert r.verdict is Verdict.OK, r.detail
    own = r.evidence.build["own_kernels"]
    assert own["measured"] and own["own_fraction"] > 0.9, own
    assert [k["name"].split("(")[0] for k in own["kernels"] if k["own"]] == ["relu_kernel"], own
    r = _score(relu_task, data_dir, "cand_cuda_caught_failure.py", build_pool, num_correctness_inputs=50,
               timing_budget_s=1.0)
    assert r.verdict is Verdict.OK, r.detail
    assert [e["name"] for e in r.evidence.build["failed_extensions"]] == ["evalfarm_gpu_relu_broken"]
    own = r.evidence.build["own_kernels"]
    assert own["measured"] and own["total_us"] > 0 and own["own_fraction"] == 0.0, own


def test_peak_dram_bandwidth_from_nvml_matches_the_device():
    import torch

    from evalfarm.devices import dram_peak
    from evalfarm.judge.setup import cuda_identity

    props = torch.cuda.get_device_properties(0)
    peak = dram_peak(*cuda_identity(props))
    assert peak.bytes_per_s is not None, peak.note
    assert 5e11 < peak.bytes_per_s < 2e13, peak
    if "H200" in props.name:
        assert peak.bytes_per_s == pytest.approx(4.8e12, rel=0.1), peak
    elif "H100" in props.name and "SXM" in props.name:
        assert peak.bytes_per_s == pytest.approx(3.35e12, rel=0.1), peak


def test_illegal_memory_access_is_cuda_fault_and_the_next_candidate_is_fine(relu_task, data_dir, build_pool):
    r = _score(relu_task, data_dir, "cand_cuda_illegal_address.py", build_pool)
    assert r.verdict is Verdict.CUDA_FAULT, r.detail
    ok = _score(relu_task, data_dir, "cand_cuda_relu.py", build_pool)
    assert ok.verdict is Verdict.OK, ok.detail


def test_identical_candidate_scores_one(relu_task, data_dir, build_pool):
    r = _score(relu_task, data_dir, "cand_same.py", build_pool)
    assert r.verdict is Verdict.OK
    assert r.evidence.timing.protocol == "blocks", r.evidence.isolation  # the stream gate works here
    assert 0.97 <= r.speedup <= 1.03, r.evidence.timing
    assert r.evidence.timing.stable


def test_doing_the_work_twice_scores_half(relu_task, data_dir, build_pool):
    r = _score(relu_task, data_dir, "cand_twice.py", build_pool)
    assert r.verdict is Verdict.OK
    # 0.5 plus what the second pass gains from the part of x still in L2 (measured on an H200:
    # 0.566 alone, 0.63 with three other GPU tests running beside it under -n 4, 2026-11-27)
    assert 0.45 <= r.speedup <= 0.66, r.evidence.timing


def test_side_stream_work_is_not_paid_in_timed_blocks(relu_task, data_dir, build_pool):
    # The candidate's work on a side stream it never joins: in a timed block its output is copied out
    # on the current stream right after the call, so the side stream's work is either missing from
    # the copy (an audit catches it) or slows the calls around it; never a gain.
    r = _score(relu_task, data_dir, "cand_side_stream.py", build_pool)
    assert r.verdict is not Verdict.OK or r.speedup <= 0.5, (r.verdict, r.detail, r.evidence.timing)


def test_side_stream_work_is_timed_and_the_gap_reported(relu_task, data_dir, build_pool):
    # The "paper" policy (KernelBench's rules) refuses side streams outright ...
    r = _score(relu_task, data_dir, "cand_side_stream.py", build_pool, guard_policy="paper")
    assert r.verdict is Verdict.HACK_DETECTED and "side_stream" in r.detail
    # ... and under the default policy, with lone timed calls, the finding testifies while the
    # device-wide sync after each call times the work honestly.
    r = _score(relu_task, data_dir, "cand_side_stream.py", build_pool, timing_protocol="lone")
    assert r.verdict is Verdict.OK, r.detail
    assert any(f["guard"] == "side_stream" and not f["blocking"] for f in r.evidence.static_findings)
    assert r.speedup <= 0.5, r.evidence.timing  # three relus on a side stream are not free
    # The events on the current stream miss most of the work (how much depends on how the GPU
    # schedules the side stream: 2.6x on an H100, 1.9-2.x on an H200); the note is testimony and
    # fires from EVENT_WALL_GAP_NOTE up.
    gap = r.evidence.timing.event_wall_gap
    assert gap is not None and gap > 1.5, r.evidence.timing
    assert any(g.startswith("event_wall_gap") for g in r.evidence.guards) == (gap > EVENT_WALL_GAP_NOTE)


def test_thousand_input_correctness_is_quick_on_a_level1_task(build_pool):
    from evalfarm.tasks import builtin_suite

    suite = builtin_suite()
    task = suite.load("L1/1")
    fast = next(v for v in suite.variants("L1/1") if v.kind == "fast" and v.runs_on("cuda"))
    r = score(task, fast.load(), ScoreConfig(device="cuda"), build_pool=build_pool)
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.correctness_inputs == 1000
    # H200, 2026-11-21: 4.95-5.10 s without free-memory poisoning, 5.52-5.64 s with it (two
    # calls per input, each preceded by an allocator snapshot and fills; docs/security.md).
    assert r.evidence.phases_s["correctness"] < 12.0, r.evidence.phases_s


def test_builtin_cuda_variants_pass_static_and_symbol_guards():
    """No false positives: every shipped CUDA kernel builds for the device and no guard fires."""
    from evalfarm.build import BuildPool
    from evalfarm.devices import build_arch
    from evalfarm.guards import (
        check_candidate_source,
        check_extension_symbols,
        read_dynamic_symbols,
    )
    from evalfarm.tasks import builtin_suite

    suite = builtin_suite()
    arch = build_arch("cuda")
    checked = 0
    builds = []
    with BuildPool(max_workers=8) as pool:  # the default cache: later benchmarks get hits
        for entry in suite.entries:
            task = suite.load(entry.task_id)
            for v in suite.variants(entry.task_id):
                if v.devices == "cuda":
                    src = v.load().source
                    findings = check_candidate_source(src, reference_source=task.source)
                    assert [f for f in findings if f.blocking] == [], (v.path, findings)
                    builds.append((v, pool.submit(src, arch)))
        reports = [(v, f.result()) for v, f in builds]
    problems = []
    for v, report in reports:
        assert report.status == "ok", (v.path, report.log[-2000:])
        for ext in report.extensions:
            imports = sorted({s.name for s in read_dynamic_symbols(ext["so_path"]) if not s.defined})
            print(v.path.name, "imports:", " ".join(n for n in imports if not n.startswith(("Py", "_Py"))))
            problems += [(v.path.name, f) for f in check_extension_symbols(ext["so_path"]) if f.blocking]
            checked += 1
    assert problems == []
    assert checked >= 6


def test_a_candidate_scores_on_the_second_gpu(relu_task, data_dir, build_pool):
    """A judge on cuda:1 hands its arenas to workers that see that GPU alone, as cuda:0: the CUDA
    IPC handles are renumbered (a multi-GPU daemon's every slot but the first failed without it)."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    r = _score(relu_task, data_dir, "cand_cuda_relu.py", build_pool, device="cuda:1")
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.device_name == torch.cuda.get_device_name(1)
