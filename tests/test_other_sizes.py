"""Unseen sizes on CPU: a candidate that hard-codes the task's sizes, re-checked at another profile."""

from __future__ import annotations

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.other_sizes import other_profile
from evalfarm.scoring import as_candidate, as_task, score
from evalfarm.tasks.format import parse_task

QUICK = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.3, min_timed_rounds=7, warmup_rounds=1,
                    check_other_sizes=True)


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_sized.py"))


def _score(task, data_dir, name, build_pool, **changes):
    return score(task, as_candidate(str(data_dir / name)), QUICK.replace(**changes), build_pool=build_pool)


def test_other_profile_choice(data_dir):
    sized = as_task(str(data_dir / "task_sized.py"))
    assert other_profile(sized, "small") == "default"
    assert other_profile(sized, "default") == "small"
    two = parse_task((data_dir / "task_sized.py").read_text().replace(
        'SIZE_PROFILES = {"small": {"batch_size": 8}}', 'SIZE_PROFILES = {"wide": {"dim": 64}, "tiny": {"dim": 8}}'),
        "two")
    assert other_profile(two, "default") == "wide" and other_profile(two, "tiny") == "default"
    assert other_profile(as_task(str(data_dir / "task_scale.py")), "default") is None


def test_hard_coded_size_passes_but_fails_other_sizes(task, data_dir, build_pool, tmp_path):
    import torch

    from evalfarm.judge.diagnose import Diagnostics

    r = score(task, as_candidate(str(data_dir / "cand_sized_hardcoded.py")), QUICK, build_pool=build_pool,
              diagnostics=Diagnostics(failing_input_dir=str(tmp_path)))
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.size_profile == "small"
    other = r.evidence.other_sizes
    assert other["profile"] == "default" and other["status"] == "failed", other
    assert other["verdict"] == "INCORRECT" and "size profile 'default'" in other["detail"]
    assert "other_sizes" in r.evidence.phases_s
    # --save-failing-input also keeps the failing round at the other size, in a folder of its own.
    saved = r.evidence.diagnostics["other_sizes_failing_input"]
    assert saved["dir"] == str(tmp_path / "other_sizes_default") and saved["size_profile"] == "default"
    (cand,) = torch.load(tmp_path / "other_sizes_default" / "candidate_output.pt")
    assert cand.shape == (16, 256) and not cand[8:].any()  # the rows past the hard-coded 8 were never written


def test_require_other_sizes_makes_it_incorrect(task, data_dir, build_pool):
    r = _score(task, data_dir, "cand_sized_hardcoded.py", build_pool, require_other_sizes=True,
               check_other_sizes=False)
    assert r.verdict is Verdict.INCORRECT and r.speedup is None
    assert r.detail.startswith("other sizes (required):") and r.evidence.other_sizes["status"] == "failed"


def test_honest_candidate_is_ok_at_other_sizes(task, data_dir, build_pool):
    r = _score(task, data_dir, "cand_sized_honest.py", build_pool, require_other_sizes=True)
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.other_sizes["status"] == "ok" and r.evidence.other_sizes["correctness_inputs"] == 5


def test_task_without_other_sizes_is_not_applicable(data_dir, build_pool):
    r = score(as_task(str(data_dir / "task_scale.py")), as_candidate(str(data_dir / "cand_same.py")),
              QUICK.replace(require_other_sizes=True), build_pool=build_pool)
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.other_sizes["status"] == "not_applicable" and r.evidence.other_sizes["profile"] is None


def test_off_by_default_in_the_library(task, data_dir, build_pool):
    r = _score(task, data_dir, "cand_sized_hardcoded.py", build_pool, check_other_sizes=False)
    assert r.verdict is Verdict.OK and r.evidence.other_sizes == {}


def test_batch_constant_and_derived_profile(data_dir):
    from evalfarm.other_sizes import DERIVED_PROFILE, batch_constant, with_derived_profile

    assert batch_constant("import torch\nbatch_size = 16\ndim = 4\n") == ("batch_size", 16)
    assert batch_constant("batch: int = 3\n") == ("batch", 3)
    assert batch_constant("batch_size = True\n") is None  # a bool is not a size
    assert batch_constant("def f():\n    batch_size = 4\n") is None  # module level only
    assert batch_constant("batch_size = n * 2\n") is None  # an expression: not known safe to scale
    kb = as_task(str(data_dir / "task_batch_const.py"))
    derived = with_derived_profile(kb)
    assert derived.size_profiles == {DERIVED_PROFILE: {"batch_size": 9}} and derived.sha256 == kb.sha256
    assert other_profile(derived, "default") == DERIVED_PROFILE
    sized = as_task(str(data_dir / "task_sized.py"))
    assert with_derived_profile(sized) is sized  # declared profiles win
    one = parse_task((data_dir / "task_batch_const.py").read_text().replace("batch_size = 16", "batch_size = 1"), "one")
    assert with_derived_profile(one) is one


def test_kernelbench_style_batch_constant_is_rechecked(data_dir, build_pool):
    task = as_task(str(data_dir / "task_batch_const.py"))
    bad = score(task, as_candidate(str(data_dir / "cand_batch_hardcoded.py")), QUICK, build_pool=build_pool)
    assert bad.verdict is Verdict.OK, bad.detail
    other = bad.evidence.other_sizes
    assert other["profile"] == "scaled_batch" and other["status"] == "failed", other
    good = score(task, as_candidate(str(data_dir / "cand_sized_honest.py")), QUICK, build_pool=build_pool)
    assert good.verdict is Verdict.OK and good.evidence.other_sizes["status"] == "ok", good.evidence.other_sizes


def test_the_check_at_another_size_sets_up_only_what_correctness_needs(task, data_dir, build_pool, monkeypatch):
    """The correctness-only evaluation neither counts FLOPs for a roofline nor computes float64
    ground truths nor probes the task for degenerate outputs: none of it decides its verdict."""
    from evalfarm import other_sizes
    from evalfarm.judge.setup import CORRECTNESS_ONLY_PRECISION

    seen = []
    real = other_sizes.from_result
    monkeypatch.setattr(other_sizes, "from_result", lambda p, result, s: seen.append(result) or real(p, result, s))
    r = _score(task, data_dir, "cand_sized_honest.py", build_pool)
    assert r.verdict is Verdict.OK and r.evidence.other_sizes["status"] == "ok", r.detail
    assert r.evidence.precision.get("applied") is True, r.evidence.precision  # the scored size: gated
    assert r.evidence.roofline
    (check,) = seen
    assert check.evidence.precision == {"applied": False, "note": CORRECTNESS_ONLY_PRECISION}
    assert check.evidence.roofline == {} and check.evidence.timing is None
    assert check.evidence.correctness_inputs == 5
