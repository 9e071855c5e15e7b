"""Task and candidate files, the built-in suite's addressing, and KernelBench checkouts."""

from __future__ import annotations

import pytest

from evalfarm.tasks import (
    TaskFormatError,
    UnknownTaskError,
    builtin_suite,
    instantiate_task,
    kernelbench_suite,
    load_task_file,
    parse_candidate,
    parse_task,
    resolve_task,
)

RELU = """import torch
import torch.nn as nn

batch_size = 16
dim = 1024
SIZE_PROFILES = {"small": {"dim": 32}}

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
"""


@pytest.fixture
def kb_root(tmp_path):
    lvl = tmp_path / "KernelBench" / "level1"
    lvl.mkdir(parents=True)
    (lvl / "19_ReLU.py").write_text(RELU)
    (lvl / "1_Square_matrix_multiplication_.py").write_text(RELU.replace("torch.relu(x)", "x @ x.T"))
    (tmp_path / "KernelBench" / "level2").mkdir()
    return tmp_path


def test_missing_parts_are_named():
    with pytest.raises(TaskFormatError, match=r"missing: class Model\(nn.Module\), def get_inputs\(\)"):
        parse_task("def get_init_inputs():\n    return []\n", "t")
    with pytest.raises(TaskFormatError, match="is empty"):
        parse_task("   \n", "t")
    with pytest.raises(TaskFormatError, match="line 1"):
        parse_task("class Model(:\n", "t")
    with pytest.raises(TaskFormatError, match="ModelNew"):
        parse_candidate("class Model: pass\n")
    with pytest.raises(TaskFormatError, match="SIZE_PROFILES must be a literal"):
        parse_task(RELU.replace('{"small": {"dim": 32}}', "make()"), "t")


def test_missing_and_non_utf8_files(tmp_path):
    with pytest.raises(TaskFormatError, match="not found"):
        load_task_file(tmp_path / "nope.py")
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"\xff\xfe class Model")
    with pytest.raises(TaskFormatError, match="UTF-8"):
        load_task_file(bad)


def test_kernelbench_checkout_addressing(kb_root):
    suite = kernelbench_suite(kb_root)
    assert [e.task_id for e in suite.entries] == ["L1/1", "L1/19"]
    for key in ("L1/19", "l1/19", "19_ReLU", "relu"):
        assert suite.load(key).name == "L1/19_ReLU"
    assert resolve_task("L1/19", kernelbench_root=kb_root).level == 1
    with pytest.raises(UnknownTaskError, match="L1/99"):
        suite.load("L1/99")
    with pytest.raises(UnknownTaskError, match="not a KernelBench checkout"):
        kernelbench_suite(kb_root / "KernelBench" / "level2")


def test_size_profiles_override_globals_at_call_time():
    task = parse_task(RELU, "relu")
    assert task.resolve_profile("auto", "cpu") == "small"
    assert task.resolve_profile("auto", "cuda") == "default"
    small = instantiate_task(task, "small")
    assert small.get_inputs()[0].shape == (16, 32)
    assert instantiate_task(task, "default").get_inputs()[0].shape == (16, 1024)
    with pytest.raises(TaskFormatError, match="no size profile 'huge'"):
        task.resolve_profile("huge", "cpu")
    bad = parse_task(RELU.replace('"dim": 32', '"dimm": 32'), "relu")
    with pytest.raises(TaskFormatError, match="unknown global 'dimm'"):
        instantiate_task(bad, "small")


def test_builtin_suite_resolves_by_id_and_name():
    suite = builtin_suite()
    assert len(suite.entries) >= 24
    first = suite.entries[0]
    assert resolve_task(first.task_id).source == first.path.read_text()
    assert resolve_task(first.name.lower()).name == resolve_task(first.task_id).name
    with pytest.raises(UnknownTaskError):
        resolve_task("definitely_not_a_task")


@pytest.mark.parametrize("expr, ok", [("1 << 14", 16384), ("64 * 1024", 65536), ("-(3)", -3),
                                      ("9**9**9**9", None), ("1 << 100000", None), ("f()", None),
                                      ("().__class__", None), ("(1 << 62) * (1 << 62)", None)])
def test_size_profiles_allow_bounded_constant_arithmetic_only(expr, ok):
    src = RELU.replace('{"small": {"dim": 32}}', '{"small": {"dim": ' + expr + '}}')
    if ok is None:
        with pytest.raises(TaskFormatError, match="SIZE_PROFILES"):
            parse_task(src, "t")
    else:
        assert parse_task(src, "t").size_profiles == {"small": {"dim": ok}}


def test_exec_module_sources_are_readable_by_inspect():
    # Triton's @triton.jit (and tracebacks) read a function's source through linecache.
    import inspect

    from evalfarm.tasks.format import exec_module

    src = "def kernel(x):\n    return x + 1\n\n\nclass ModelNew:\n    def forward(self, x):\n        return kernel(x)\n"
    module = exec_module(src, "evalfarm_test_inspect", "candidate_inspect.py")
    assert inspect.getsource(module.kernel) == "def kernel(x):\n    return x + 1\n"
    assert "return kernel(x)" in inspect.getsource(module.ModelNew)


@pytest.mark.parametrize("expr", ["+".join(["1"] * 20_000), "+".join(["1"] * 3000), "(" * 5000 + "1" + ")" * 5000])
def test_a_pathological_size_profile_expression_is_a_task_format_error(expr):
    # Too long or too deep to parse or evaluate: a TaskFormatError (INVALID_ARGUMENT at the daemon),
    # never a RecursionError.
    src = RELU.replace("batch_size = 16", f"batch_size = 16\nSIZE_PROFILES = {{'small': {{'batch_size': {expr}}}}}")
    with pytest.raises(TaskFormatError):
        parse_task(src, "deep")
