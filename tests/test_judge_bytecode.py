"""The judges' bytecode cache (evalfarm.judge.bytecode): when it is used, what a judge's
environment then says, and that no worker's environment carries it."""

from __future__ import annotations

import os
import py_compile
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from evalfarm import ScoreConfig, Verdict, sandbox
from evalfarm.judge import bytecode
from evalfarm.sandbox import isolation
from evalfarm.scoring import score


@pytest.fixture(autouse=True)
def fresh_decisions():
    bytecode._decide.cache_clear()
    yield
    bytecode._decide.cache_clear()


def _module(tmp_path: Path, name: str = "probe_mod") -> Path:
    pkg = tmp_path / "lib"
    pkg.mkdir(exist_ok=True)
    src = pkg / f"{name}.py"
    src.write_text("VALUE = 1\n")
    return src


def test_current_bytecode_is_recognised_and_a_stale_or_missing_one_is_not(tmp_path):
    src = _module(tmp_path)
    assert not bytecode.has_current_bytecode(str(src))  # none written
    py_compile.compile(str(src), cfile=bytecode._plain_cache_path(str(src)), doraise=True)
    assert bytecode.has_current_bytecode(str(src))
    st = src.stat()
    os.utime(src, (st.st_atime, st.st_mtime + 10))  # the source changed after it was compiled
    assert not bytecode.has_current_bytecode(str(src))
    py_compile.compile(str(src), cfile=bytecode._plain_cache_path(str(src)), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    os.utime(src, (st.st_atime, st.st_mtime + 20))
    assert bytecode.has_current_bytecode(str(src))  # hash-based: Python checks the source itself
    Path(bytecode._plain_cache_path(str(src))).write_bytes(b"\0" * 16)  # another interpreter's magic
    assert not bytecode.has_current_bytecode(str(src))


def test_the_library_probe_finds_modules_without_bytecode(tmp_path, monkeypatch):
    src = _module(tmp_path, "probe_no_pyc")
    monkeypatch.syspath_prepend(str(src.parent))
    assert bytecode.library_lacks_bytecode(("probe_no_pyc",))
    py_compile.compile(str(src), cfile=bytecode._plain_cache_path(str(src)), doraise=True)
    assert not bytecode.library_lacks_bytecode(("probe_no_pyc",))
    assert not bytecode.library_lacks_bytecode(("no_such_module_here", "no_such_package.sub"))
    # A submodule of a package, found on disk without importing the package.
    pkg = src.parent / "probe_pkg"
    (pkg / "sub").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "sub" / "__init__.py"):
        init.write_text("raise RuntimeError('imported')\n")
        py_compile.compile(str(init), cfile=bytecode._plain_cache_path(str(init)), doraise=True)
    assert not bytecode.library_lacks_bytecode(("probe_pkg", "probe_pkg.sub"))
    os.remove(bytecode._plain_cache_path(str(pkg / "sub" / "__init__.py")))
    assert bytecode.library_lacks_bytecode(("probe_pkg", "probe_pkg.sub"))
    assert "probe_pkg" not in sys.modules


def test_the_library_probe_imports_nothing():
    out = subprocess.run([sys.executable, "-c", "import sys\nfrom evalfarm.judge import bytecode\n"
                          "bytecode.library_lacks_bytecode()\nprint('torch' in sys.modules, 'sympy' in sys.modules)"],
                         capture_output=True, text=True, timeout=60, cwd=sandbox.project_root())
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_the_cache_is_a_prefix_for_judges_only(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "from-the-host"))
    with_cache = sandbox.judge_env(str(tmp_path), bytecode_dir=str(tmp_path / "bc"))
    assert with_cache["PYTHONPYCACHEPREFIX"] == str(tmp_path / "bc")
    assert "PYTHONDONTWRITEBYTECODE" not in with_cache
    without = sandbox.judge_env(str(tmp_path))
    assert without["PYTHONDONTWRITEBYTECODE"] == "1" and "PYTHONPYCACHEPREFIX" not in without
    # A worker's environment is built afresh: never the judge's cache, whatever the host has.
    worker = sandbox.clean_env(str(tmp_path))
    assert "PYTHONPYCACHEPREFIX" not in worker and worker["PYTHONDONTWRITEBYTECODE"] == "1"


def test_a_judge_environment_writes_its_bytecode_into_the_cache_only(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "judged_import.py").write_text("VALUE = 41 + 1\n")
    cache = tmp_path / "bc"
    for where, expect_written in (("", False), (str(cache), True)):  # without first: nothing written
        env = sandbox.judge_env(str(tmp_path), {"PYTHONPATH": str(lib)}, bytecode_dir=where)
        out = subprocess.run([sys.executable, "-c", "import judged_import; print(judged_import.VALUE)"],
                             env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == "42", out.stderr
        written = sorted(p.name for p in cache.rglob("judged_import*.pyc")) if cache.exists() else []
        assert bool(written) == expect_written
        assert not (lib / "__pycache__").exists()  # never beside the source


def _fake_isolation(monkeypatch, build: str, worker: str) -> None:
    found = isolation.Isolation("cpu", build, worker, "x", "own network namespace", (), "")
    monkeypatch.setattr(isolation, "assess", lambda device="cpu": found)


def test_candidates_that_could_write_it_turn_the_cache_off(monkeypatch):
    _fake_isolation(monkeypatch, "bubblewrap", "bubblewrap")
    assert bytecode.candidates_cannot_write("cpu") == (True, "")
    _fake_isolation(monkeypatch, "bwrap not found on PATH", "bwrap not found on PATH")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the daemon's uid, no namespace: they could
    safe, why = bytecode.candidates_cannot_write("cpu")
    assert not safe and "uid" in why
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # as root, candidates under another uid
    monkeypatch.delenv("EVALFARM_SANDBOX_UID", raising=False)
    assert bytecode.candidates_cannot_write("cpu")[0]
    monkeypatch.setenv("EVALFARM_SANDBOX_UID", "off")  # ... unless they stay root
    assert not bytecode.candidates_cannot_write("cpu")[0]


def test_the_setting_decides_and_the_directory_is_closed(tmp_path, monkeypatch):
    cache = tmp_path / "cache" / "judge-bytecode"
    monkeypatch.setattr(bytecode, "cache_dir", lambda: cache)
    _fake_isolation(monkeypatch, "bubblewrap", "bubblewrap")
    monkeypatch.setattr(bytecode, "library_lacks_bytecode", lambda modules=(): False)
    for value, expected in (("off", ""), ("auto", ""), ("on", str(cache))):
        monkeypatch.setenv(bytecode.SWITCH_ENV, value)
        assert bytecode.judge_cache("cpu") == expected
    assert cache.stat().st_mode & 0o777 == 0o700
    bytecode._decide.cache_clear()
    monkeypatch.setattr(bytecode, "library_lacks_bytecode", lambda modules=(): True)
    monkeypatch.setenv(bytecode.SWITCH_ENV, "auto")
    assert bytecode.judge_cache("cpu") == str(cache)  # the library lacks it: auto uses the cache
    bytecode._decide.cache_clear()
    _fake_isolation(monkeypatch, "bwrap not found on PATH", "bwrap not found on PATH")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv(bytecode.SWITCH_ENV, "on")
    assert bytecode.judge_cache("cpu") == ""  # never where a candidate could write it
    monkeypatch.setenv(bytecode.SWITCH_ENV, "sometimes")
    with pytest.raises(bytecode.SettingError, match="EVALFARM_JUDGE_BYTECODE='sometimes'"):
        bytecode.judge_cache("cpu")


def test_a_cache_directory_of_another_user_is_not_used(tmp_path, monkeypatch):
    cache = tmp_path / "judge-bytecode"
    cache.mkdir()
    monkeypatch.setattr(bytecode, "cache_dir", lambda: cache)
    _fake_isolation(monkeypatch, "bubblewrap", "bubblewrap")
    monkeypatch.setenv(bytecode.SWITCH_ENV, "on")
    real_uid = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real_uid + 1)
    assert bytecode.judge_cache("cpu") == ""


QUICK = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.3, min_timed_rounds=7, warmup_rounds=1,
                    check_other_sizes=False)


def test_a_bad_setting_is_named_by_the_daemon_and_by_an_evaluation(data_dir, build_pool, monkeypatch):
    from evalfarm.server.config import ServerConfig, ServerConfigError
    from evalfarm.server.daemon import check_judge_bytecode

    monkeypatch.setenv(bytecode.SWITCH_ENV, "yes please")
    with pytest.raises(ServerConfigError, match="EVALFARM_JUDGE_BYTECODE='yes please': expected one of auto, on, off"):
        check_judge_bytecode(ServerConfig())
    r = score(data_dir / "task_scale.py", data_dir / "cand_same.py", QUICK, build_pool=build_pool)
    assert r.verdict is Verdict.INFRA_ERROR and "EVALFARM_JUDGE_BYTECODE" in r.detail


def test_judges_fill_the_cache_with_library_and_farm_bytecode_only(data_dir, build_pool, tmp_path, monkeypatch):
    """Two evaluations with the cache on: both OK; the first judge filled the cache, and every
    file there is bytecode of a module of the interpreter's library or of the evalfarm package
    (a task's module is executed, never imported; no candidate code runs in a judge)."""
    if not bytecode.candidates_cannot_write("cpu")[0]:
        pytest.skip("candidates could write a cache here (no bubblewrap, the daemon's uid): judges use none")
    cache = tmp_path / "judge-bytecode"
    monkeypatch.setattr(bytecode, "cache_dir", lambda: cache)
    monkeypatch.setenv(bytecode.SWITCH_ENV, "on")
    for _ in range(2):
        r = score(data_dir / "task_scale.py", data_dir / "cand_same.py", QUICK, build_pool=build_pool)
        assert r.verdict is Verdict.OK, r.detail
        assert any(str(cache) in note for note in r.evidence.isolation), r.evidence.isolation  # said
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert any(p.name.startswith("judge.cpython") and p.parent.name == "judge" for p in files)
    assert any(p.parent.name == "torch" and p.name.startswith("__init__.cpython") for p in files)
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sandbox.project_root(),
                                           *site.getsitepackages(), sysconfig.get_paths()["stdlib"])}
    for p in files:
        source = "/" + str(p.relative_to(cache).parent)
        assert p.suffix == ".pyc", p
        assert any(os.path.realpath(source).startswith(root + os.sep) or source.startswith(root + os.sep)
                   for root in roots), f"bytecode of a module outside the library and the package: {source}"


def test_a_worker_reads_the_judges_cache_and_may_not_write_it(tmp_path, monkeypatch):
    from evalfarm.judge import worker_processes
    from evalfarm.judge.roles import REFERENCE

    cache = tmp_path / "bc"
    cache.mkdir()
    seen: dict = {}

    class Started(Exception):
        pass

    def fake_popen(argv, **kwargs):
        seen.update(argv=list(argv), env=kwargs["env"])
        raise Started

    monkeypatch.setattr(worker_processes.subprocess, "Popen", fake_popen)
    gone = str(tmp_path / "removed-under-the-daemon")
    # A judge without the cache, one whose cache was removed meanwhile, then one with it.
    for prefix, expected in ((None, None), (gone, None), (str(cache), str(cache))):
        seen.clear()
        monkeypatch.setattr(sys, "pycache_prefix", prefix)
        with pytest.raises(Started):
            worker_processes.WorkerHandle("cpu", str(tmp_path / "w"), REFERENCE)
        env, argv = seen["env"], seen["argv"]
        assert env["PYTHONDONTWRITEBYTECODE"] == "1"  # a worker never writes bytecode
        assert env.get("PYTHONPYCACHEPREFIX") == expected
        assert gone not in argv
        binds = [argv[k:k + 3] for k in range(len(argv) - 2) if argv[k] in ("--bind", "--ro-bind")]
        assert not any(str(cache) in b[1] for b in binds if b[0] == "--bind")  # never writable
        if expected and "--ro-bind" in argv:  # in bubblewrap: shown read-only
            assert ["--ro-bind", str(cache), str(cache)] in binds
