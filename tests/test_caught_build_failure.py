"""A build failure the candidate catches is not a verdict (DESIGN.md, "Run the candidate's code as
Python would"): the failure reaches its import as the exception load_inline raises, and what it
does next is judged like any other code; the evidence says what failed. An uncaught failure stays
COMPILE_ERROR, and a refused source stays a verdict whatever the candidate catches."""

from __future__ import annotations

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.build import BuildPool
from evalfarm.scoring import as_candidate, as_task, score

QUICK = ScoreConfig(num_correctness_inputs=40, timing_budget_s=1.0, min_timed_rounds=35)
BROKEN = "#include <Python.h>\nstatic PyObject* f(PyObject*, PyObject* x) { return x }  // missing semicolon\n"


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_scale.py"))


def _score(task, data_dir, name, build_pool):
    return score(task, as_candidate(str(data_dir / name)), QUICK, build_pool=build_pool)


def test_caught_failure_falls_back_and_scores_ok_with_the_failure_in_the_evidence(task, data_dir, build_pool):
    # The candidate itself checks that it got torch's RuntimeError("Error building extension '...': <log>").
    r = _score(task, data_dir, "cand_caught_build_failure.py", build_pool)
    assert r.verdict is Verdict.OK, r.detail
    build = r.evidence.build
    [failed] = build["failed_extensions"]
    assert failed["name"] == "evalfarm_test_caught_failure" and len(failed["key"]) == 64
    assert failed["type"] == "RuntimeError" and "missing semicolon" in failed["log"] and "error" in failed["log"]
    assert "message" not in failed  # the exception's text repeats the log
    assert build["extensions"] == [] and build["worker_extensions"] == []
    # The worker raised the pool's failure (nothing compiled there) and the candidate went on.
    assert build["worker_build_failures"] == [{"name": failed["name"], "key": failed["key"], "recorded": True}]
    # None of its time can be in kernels of its own: it loaded none.
    assert build["own_kernels"]["measured"] is False and build["own_kernels"]["own_fraction"] == 0.0


def test_uncaught_failure_is_compile_error_with_the_compilers_output(task, data_dir, build_pool):
    r = _score(task, data_dir, "cand_compile_error.py", build_pool)
    assert r.verdict is Verdict.COMPILE_ERROR
    assert "Error building extension 'evalfarm_test_compile_error'" in r.detail and "missing semicolon" in r.detail
    assert r.evidence.build["failed_extensions"][0]["name"] == "evalfarm_test_compile_error"
    assert "judge_setup" not in r.evidence.phases_s  # decided by the build: the discover step saw it escape


def test_failure_that_escapes_in_the_worker_is_compile_error(task, data_dir, build_pool):
    """The module catches the failure (no verdict from the build); ModelNew raises an error from it:
    the worker recognises the failure it raised behind that error."""
    r = _score(task, data_dir, "cand_build_failure_reraised.py", build_pool)
    assert r.verdict is Verdict.COMPILE_ERROR, r.detail
    assert "Error building extension 'evalfarm_test_reraised_failure'" in r.detail
    assert "judge_setup" in r.evidence.phases_s


def test_caught_failure_then_wrong_values_is_incorrect(task, data_dir, build_pool):
    r = _score(task, data_dir, "cand_caught_build_failure_wrong.py", build_pool)
    assert r.verdict is Verdict.INCORRECT, r.detail
    assert r.evidence.build["failed_extensions"][0]["name"] == "evalfarm_test_caught_then_wrong"


def test_one_extension_fails_others_build_and_a_corrected_source_is_discovered(task, data_dir, build_pool):
    r = _score(task, data_dir, "cand_build_retry.py", build_pool)
    assert r.verdict is Verdict.OK, r.detail
    build = r.evidence.build
    assert [e["name"] for e in build["failed_extensions"]] == ["evalfarm_test_retry_broken"]
    # The call in the except block was discovered once the failure was raised in discover too,
    # and built by the pool: the worker loaded both from the cache, compiling nothing.
    assert [e["name"] for e in build["extensions"]] == ["evalfarm_test_retry_first", "evalfarm_test_retry_fixed"]
    assert [(e["name"], e["cache_hit"]) for e in build["worker_extensions"]] == [
        ("evalfarm_test_retry_first", True), ("evalfarm_test_retry_fixed", True)]
    assert build["own_kernels"] == {"measured": False, "note": build["own_kernels"]["note"]}
    assert "not measured on CPU" in build["own_kernels"]["note"]


def _candidate(body: str) -> str:
    return ("import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
            f"BROKEN = {BROKEN!r}\n{body}\n\n"
            "class ModelNew(nn.Module):\n"
            "    def __init__(self, scale):\n        super().__init__()\n        self.scale = scale\n"
            "        self.bias = nn.Parameter(torch.randn(8192))\n"
            "    def forward(self, x):\n        return torch.relu(x) * self.scale + self.bias\n")


def test_the_same_broken_source_is_compiled_once(tmp_path):
    """Two candidates (different files) with the same broken extension: the pool remembers the
    failure (its own record, in memory) and does not compile it again."""
    body = ("try:\n    ext = load_inline(name='evalfarm_test_failed_once', cpp_sources=BROKEN, "
            "no_implicit_headers=True)\nexcept RuntimeError:\n    ext = None\n")
    with BuildPool(max_workers=1, cache_dir=tmp_path) as pool:
        first = pool.build(_candidate(body), "cpu")
        second = pool.build(_candidate(body) + "# another candidate\n", "cpu")
        stats = pool.stats()
    assert first.status == second.status == "ok", (first.log, second.log)
    assert [e["cache_hit"] for e in first.failed_extensions] == [False]
    assert [e["cache_hit"] for e in second.failed_extensions] == [True]
    assert first.failed_extensions[0]["key"] == second.failed_extensions[0]["key"]
    assert second.failed_extensions[0]["log"] == first.failed_extensions[0]["log"]
    assert stats["failed_compiles"] == 1 and stats["failure_hits"] == 1, stats
    # Nothing of a failure is written to the cache: only the pool's memory holds it.
    assert not any((tmp_path / "ext").iterdir())


REFUSED = '#include "/etc/hostname"\n' + BROKEN


def test_a_refused_include_in_a_caught_call_is_still_refused(task, build_pool):
    """Refusing a source is the farm declining to compile it, not a compiler's answer: the
    candidate cannot catch it and go on. At module level the pool refuses it (whatever the module
    did with the error in discover); in ModelNew (not discovered) the worker ends the evaluation."""
    module_level = _candidate("try:\n    ext = load_inline(name='evalfarm_test_refused_module', "
                              "cpp_sources=REFUSED, no_implicit_headers=True)\nexcept Exception:\n    ext = None\n"
                              .replace("REFUSED", repr(REFUSED)))
    r = score(task, as_candidate(module_level), QUICK, build_pool=build_pool)
    assert r.verdict is Verdict.COMPILE_ERROR, r.detail
    assert "refused" in r.detail and "/etc/hostname" in r.detail
    assert r.evidence.build["refused"] is True and "judge_setup" not in r.evidence.phases_s

    in_init = _candidate("").replace(
        "        self.scale = scale\n",
        "        self.scale = scale\n        try:\n"
        f"            load_inline(name='evalfarm_test_refused_init', cpp_sources={REFUSED!r}, "
        "no_implicit_headers=True)\n        except BaseException:\n            pass\n")
    r = score(task, as_candidate(in_init), QUICK, build_pool=build_pool)
    assert r.verdict is Verdict.COMPILE_ERROR, r.detail
    assert "refused" in r.detail and "/etc/hostname" in r.detail
