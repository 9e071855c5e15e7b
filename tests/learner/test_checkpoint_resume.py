"""Kill a training subprocess with SIGKILL mid-run; the restart resumes bit-exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WORKER = Path(__file__).with_name("resume_worker.py")
TOTAL = 10


def _env() -> dict[str, str]:
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}


def _run(ckpt: Path, out: Path, sleep: float = 0.0) -> str:
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(ckpt), str(out), str(TOTAL), str(sleep)],
        capture_output=True, text=True, env=_env(), timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _load(p: Path) -> dict[str, np.ndarray]:
    with np.load(p) as z:
        return {k: z[k] for k in z.files}


def test_sigkill_and_resume(tmp_path: Path) -> None:
    # Uninterrupted reference run.
    ref_out = tmp_path / "ref"
    assert "DONE" in _run(tmp_path / "ref_ckpt", ref_out)

    # Interrupted run: SIGKILL once step 6 is durably saved.
    ckpt, out = tmp_path / "ckpt", tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(ckpt), str(out), str(TOTAL), "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    deadline = time.time() + 180
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "SAVED 6" or time.time() > deadline:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    done_steps = sorted(
        int(p.name) for p in ckpt.iterdir() if p.is_dir() and p.name.isdigit()
    )
    assert done_steps and done_steps[-1] >= 6

    stdout = _run(ckpt, out)
    resumed = int(next(ln for ln in stdout.splitlines() if ln.startswith("RESUMED")).split()[1])
    assert resumed == done_steps[-1]
    got = _load(out / f"resumed_{resumed}.npz")
    want = _load(ref_out / f"params_{resumed}.npz")
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    final_got, final_want = _load(out / f"params_{TOTAL}.npz"), _load(ref_out / f"params_{TOTAL}.npz")
    for k in final_want:
        np.testing.assert_array_equal(final_got[k], final_want[k], err_msg=k)
    # keep-last-N (max_to_keep=2) holds after the resumed run finishes
    assert sorted(int(p.name) for p in ckpt.iterdir() if p.name.isdigit()) == [TOTAL - 2, TOTAL]
