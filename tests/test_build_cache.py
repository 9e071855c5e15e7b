"""The content-addressed build cache and the build pool's timeouts."""

from __future__ import annotations

import os
import time

import pytest

from evalfarm.build import BuildPool, ExtensionCache
from evalfarm.build.cache import extension_key, extension_spec
from evalfarm.build.hook import uses_inline_extensions
from tests.service.conftest import process_state
from tests.tiny_extension import python_module


def test_key_covers_sources_flags_and_toolchain():
    spec = extension_spec("m", "int f();", None, {"functions": ["f"], "extra_cflags": ["-O2"]})
    tools = {"torch": "2.13", "arch": "cpu"}
    k = extension_key(spec, tools)
    assert k == extension_key(extension_spec("m", ["int f();"], None, {"functions": ["f"], "extra_cflags": ["-O2"]}), tools)
    assert k != extension_key(extension_spec("m", "int f();", None, {"functions": ["f"], "extra_cflags": ["-O3"]}), tools)
    assert k != extension_key(spec, {**tools, "arch": "sm_90"})
    assert k != extension_key(spec, {**tools, "torch": "2.11"})
    # A build without torch's implicit header is another build (the sources alone decide what they include).
    assert k != extension_key(extension_spec("m", "int f();", None, {"functions": ["f"], "extra_cflags": ["-O2"],
                                                                       "no_implicit_headers": True}), tools)


def test_install_is_atomic_and_stale_dirs_are_swept(tmp_path):
    cache = ExtensionCache(tmp_path)
    key = "ab" * 32
    d = tmp_path / "private"
    d.mkdir()
    (d / "m.so").write_bytes(b"\x7fELF")
    (d / "lock").write_text("")  # a torch FileBaton lock must never reach the cache
    assert cache.lookup(key, "m") is None
    entry, _ = cache.install(key, d, {"seconds": 0.0})
    assert cache.lookup(key, "m") == entry / "m.so" and not (entry / "lock").exists()
    stale = cache.tmp_root / "cd-left-by-a-killed-install"
    stale.mkdir()
    (stale / "lock").write_text("")
    old = time.time() - 10 * 3600
    os.utime(stale, (old, old))
    assert cache.sweep_stale() == 1 and not stale.exists()


def test_candidates_without_extensions_skip_the_pool(tmp_path):
    assert not uses_inline_extensions("import torch\nclass ModelNew: pass\n")
    assert uses_inline_extensions("from torch.utils.cpp_extension import load_inline as li\n")
    with BuildPool(cache_dir=tmp_path) as pool:
        r = pool.build("import torch\nclass ModelNew: pass\n", "cpu")
        assert r.status == "skipped" and pool.stats()["skipped"] == 1


def test_build_timeout_kills_the_whole_process_group(tmp_path):
    # The child is found by a marker in its command line: inside the build runner's PID
    # namespace its own pid means nothing on the host.
    marker = f"evalfarm-build-child-{os.getpid()}-{time.monotonic_ns()}"
    src = (
        "import subprocess, time\nfrom torch.utils.cpp_extension import load_inline  # noqa\n"
        f"p = subprocess.Popen(['sh', '-c', 'sleep 600', {marker!r}])\n"
        "time.sleep(600)\n"
    )
    with BuildPool(cache_dir=tmp_path / "cache", timeout_s=8) as pool:
        t0 = time.monotonic()
        r = pool.build(src, "cpu")
        assert r.status == "timeout" and time.monotonic() - t0 < 30
    time.sleep(0.5)
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue  # gone: killed and reaped
        if marker.encode() in cmdline:
            assert process_state(int(pid)) in (None, "Z"), "the candidate's child survived the build timeout"


# pybind11's headers (unused) make the compile itself take seconds, so a build is still under way
# after 3 s on any machine; torch's own header would take 30-40 s.
SLOW_TWICE = python_module({"twice": "return PyLong_FromLong(2 * PyLong_AsLong(arg));"},
                           prelude="#include <pybind11/pybind11.h>")


def test_killed_build_leaves_no_lock_that_blocks_the_next(tmp_path):
    src = (
        "from torch.utils.cpp_extension import load_inline\n"
        f"m = load_inline(name='evalfarm_test_kill', cpp_sources={SLOW_TWICE!r}, no_implicit_headers=True)\n"
        "assert m.twice(21) == 42\n"
    )
    with BuildPool(cache_dir=tmp_path, timeout_s=3) as pool:
        assert pool.build(src, "cpu").status == "timeout"  # killed mid-build (its two children need more)
    # The killed build compiled in its own private directory: nothing of it reached the cache.
    assert not list((tmp_path / "ext").iterdir()) and not list((tmp_path / "tmp").iterdir())
    with BuildPool(cache_dir=tmp_path, timeout_s=300) as pool:
        r = pool.build(src, "cpu")
        assert r.status == "ok", r.log
        assert [e["cache_hit"] for e in r.extensions] == [False]
        r2 = pool.build(src, "cpu")
        assert [e["cache_hit"] for e in r2.extensions] == [True]


def test_a_toolchain_child_that_dies_without_a_result_is_tried_once_more(tmp_path, monkeypatch):
    with BuildPool(cache_dir=tmp_path / "cache") as pool:
        real, calls = pool._child, []

        def first_dies(request, tmp, arch, deadline):
            calls.append(request["mode"])
            if len(calls) == 1:  # as a crash importing torch ends it: no result file
                return None, "build process exited with code -11 without a result\n"
            return real(request, tmp, arch, deadline)

        monkeypatch.setattr(pool, "_child", first_dies)
        tools = pool._toolchain("cpu", False, str(tmp_path), time.monotonic() + 120)
        assert calls == ["toolchain", "toolchain"] and tools["arch"] == "cpu" and tools["torch"]


def test_a_toolchain_that_never_describes_itself_is_the_farms_error(tmp_path, monkeypatch):
    with BuildPool(cache_dir=tmp_path / "cache") as pool:
        calls = []

        def always_dies(request, tmp, arch, deadline):
            calls.append(request["mode"])
            return None, "build process exited with code -11 without a result\n"

        monkeypatch.setattr(pool, "_child", always_dies)
        with pytest.raises(RuntimeError, match="cannot describe the toolchain: build process exited with code -11"):
            pool._toolchain("cpu", False, str(tmp_path), time.monotonic() + 120)
        assert len(calls) == 2  # tried twice, then given up: no endless retries
