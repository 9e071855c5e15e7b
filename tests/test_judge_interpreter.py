"""The judges' Python is checked before anything is scored (evalfarm.judge.interpreter): an
interpreter without torch stops `evalfarm serve`, `evalfarm score` and an evaluation with one
message naming the module and the interpreter, instead of an INFRA_ERROR from inside every judge."""

from __future__ import annotations

import subprocess
import sys
import venv

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge import interpreter
from evalfarm.scoring import score

QUICK = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.3, min_timed_rounds=7, warmup_rounds=1,
                    check_other_sizes=False)


@pytest.fixture(autouse=True)
def fresh_answers():
    interpreter.missing_modules.cache_clear()
    yield
    interpreter.missing_modules.cache_clear()


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """An interpreter that has neither torch nor numpy: a virtual environment of its own, without
    the base interpreter's site-packages."""
    root = tmp_path_factory.mktemp("bare-venv")
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(root)
    return str(root / "bin" / "python")


def test_this_interpreter_has_what_a_judge_imports():
    assert interpreter.missing_modules() == ()
    interpreter.require()


def test_an_interpreter_without_torch_is_named_with_the_fix(bare_python):
    assert interpreter.missing_modules(python=bare_python) == ("torch", "numpy")
    with pytest.raises(interpreter.JudgeInterpreterError) as err:
        interpreter.require(python=bare_python)
    assert f"the judges' Python {bare_python} cannot import torch, numpy" in str(err.value)
    assert "activate its virtual environment" in str(err.value)


def test_a_module_found_only_on_the_callers_path_counts_as_missing(tmp_path, monkeypatch):
    """Judges do not inherit PYTHONPATH: a module that only the caller's path holds is missing to them."""
    (tmp_path / "only_on_callers_path.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert subprocess.run([sys.executable, "-c", "import only_on_callers_path"]).returncode == 0
    assert interpreter.missing_modules(("only_on_callers_path", "json")) == ("only_on_callers_path",)


def test_an_interpreter_that_cannot_run_is_an_error(tmp_path):
    with pytest.raises(interpreter.JudgeInterpreterError, match="could not be run"):
        interpreter.missing_modules(python=str(tmp_path / "no-such-python"))


def test_the_daemon_the_cli_and_an_evaluation_stop_on_it(data_dir, build_pool, monkeypatch, tmp_path):
    from evalfarm import cli
    from evalfarm.server.config import ServerConfigError
    from evalfarm.server.daemon import check_judge_interpreter

    monkeypatch.setattr(interpreter, "REQUIRED", ("torch", "evalfarm_no_such_module"))
    with pytest.raises(ServerConfigError, match="cannot import evalfarm_no_such_module"):
        check_judge_interpreter()
    with pytest.raises(cli.ToolError, match="cannot import evalfarm_no_such_module"):
        cli.check_judge_interpreter()
    r = score(data_dir / "task_scale.py", data_dir / "cand_same.py", QUICK, build_pool=build_pool)
    assert r.verdict is Verdict.INFRA_ERROR and "cannot import evalfarm_no_such_module" in r.detail
