"""The persisting-L2 controls (evalfarm.judge.state), on CPU: the driver calls are faked."""

from __future__ import annotations

import ctypes

import pytest
import torch

from evalfarm.judge import state


class FakeDriver:
    """Stands in for libcuda.so.1: a persisting-L2 limit and a reset counter."""

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self.resets = 0
        self.readable = True

    def cuCtxGetLimit(self, pvalue, which):  # noqa: N802 - the driver's name
        assert which == state.CU_LIMIT_PERSISTING_L2_CACHE_SIZE == 6
        if not self.readable:
            return 201  # CUDA_ERROR_INVALID_CONTEXT
        pvalue.contents.value = self.limit
        return 0

    def cuCtxSetLimit(self, which, value):  # noqa: N802
        assert which == 6
        self.limit = value
        return 0

    def cuCtxResetPersistingL2Cache(self):  # noqa: N802
        self.resets += 1
        return 0


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(state, "_libcuda", lambda: fake)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    return fake


def test_without_cuda_in_use_nothing_is_read_or_done():
    assert not torch.cuda.is_initialized()
    assert state.persisting_l2_limit() is None
    assert state.reset_persisting_l2() is False
    assert state.cuda_state() == {}


def test_missing_libcuda_is_handled(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    state._libcuda.cache_clear()

    def no_lib(*args, **kwargs):
        raise OSError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_lib)
    try:
        assert state.persisting_l2_limit() is None
        assert state.reset_persisting_l2() is False
        assert state.cuda_state() == {}
    finally:
        state._libcuda.cache_clear()


def test_cuda_state_reads_the_limit(driver):
    driver.limit = 4 << 20
    assert state.cuda_state() == {"cuda.persisting_l2_limit": 4 << 20}
    driver.readable = False
    assert state.cuda_state() == {}


def test_set_clean_state_clears_a_leftover_limit(driver):
    driver.limit = 1 << 20
    state.set_clean_state(torch.get_num_threads())
    assert driver.limit == 0 and state.cuda_state() == {"cuda.persisting_l2_limit": 0}


def test_reset_persisting_l2_calls_the_driver(driver):
    assert state.reset_persisting_l2() is True and driver.resets == 1


FAKE_LIBCUDA = r"""
#include <stddef.h>
static size_t limits[16];
static int resets;
int cuCtxGetLimit(size_t* pvalue, int limit) { if (limit < 0 || limit > 15) return 1; *pvalue = limits[limit]; return 0; }
int cuCtxSetLimit(int limit, size_t value) { if (limit < 0 || limit > 15) return 1; limits[limit] = value; return 0; }
int cuCtxResetPersistingL2Cache(void) { resets++; return 0; }
int fake_resets(void) { return resets; }
"""


def test_the_ctypes_signatures_against_a_compiled_stand_in(tmp_path, monkeypatch):
    """The real ctypes path (argument types, pointer passing, return codes) on a C stand-in."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "fake_libcuda.c"
    src.write_text(FAKE_LIBCUDA)
    so = tmp_path / "libcuda_fake.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    real_cdll = ctypes.CDLL
    monkeypatch.setattr(ctypes, "CDLL", lambda name, *a, **k: real_cdll(str(so) if name == "libcuda.so.1" else name,
                                                                        *a, **k))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    state._libcuda.cache_clear()
    try:
        lib = state._libcuda()
        assert state.persisting_l2_limit() == 0
        lib.cuCtxSetLimit(6, 3 << 20)  # what a candidate would do
        assert state.persisting_l2_limit() == 3 << 20
        state.set_clean_state(torch.get_num_threads())  # clears it
        assert state.persisting_l2_limit() == 0
        assert state.reset_persisting_l2() is True and lib.fake_resets() == 1
    finally:
        state._libcuda.cache_clear()


def test_set_clean_state_resets_deterministic_mode_without_importing_inductor():
    """A fresh judge or worker is already non-deterministic; the reset must not pay for
    torch.use_deterministic_algorithms' import of torch._inductor (1-2 s per process), and must
    still undo a deterministic mode that was switched on."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from evalfarm.judge.state import set_clean_state\n"
        "set_clean_state(1)\n"
        "print('inductor' if 'torch._inductor' in sys.modules else 'no inductor')\n"
        "torch.use_deterministic_algorithms(True, warn_only=True)\n"
        "set_clean_state(1)\n"
        "print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.split("\n")[:2] == ["no inductor", "False False"], out
