"""Can the judges' Python import what a judge needs? Asked once, before anything is scored.

A judge is this interpreter (``sandbox.python_cmd``) started with ``sandbox.judge_env``: the
project on PYTHONPATH, no user site-packages, nothing else of the caller's path. Started from an
interpreter that lacks PyTorch (another Python on the PATH than the environment PyTorch is
installed in), or one that finds it only through the caller's PYTHONPATH or user site, every
evaluation fails alike, each an INFRA_ERROR that names a missing module from inside the judge.
``missing_modules`` runs that interpreter once with that environment (about 0.1 s; it imports
nothing but ``importlib``) and answers which of ``REQUIRED`` it cannot find; ``require`` raises
``JudgeInterpreterError`` saying which, with which interpreter, and what to do. ``evalfarm serve``
stops at start on it, ``evalfarm score`` before its first evaluation, and an evaluation started
otherwise (``scoring.score``) returns INFRA_ERROR with the same message before taking a judge.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tempfile

from evalfarm import sandbox

REQUIRED = ("torch", "numpy")
CHECK_TIMEOUT_S = 60.0
_FIND = ("import importlib.util, sys\n"
         "print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n) is None))\n")


class JudgeInterpreterError(RuntimeError):
    """The judges' interpreter cannot import a module every judge imports."""


@functools.lru_cache(maxsize=8)
def missing_modules(required: tuple[str, ...] = REQUIRED, python: str = "") -> tuple[str, ...]:
    """The names of ``required`` that ``python`` (default: this interpreter, as judges run it)
    cannot find with a judge's environment. Raises JudgeInterpreterError when it cannot even run."""
    python = python or sys.executable
    with tempfile.TemporaryDirectory(prefix="judge-check-") as tmp:
        try:
            out = subprocess.run([python, "-c", _FIND, *required], env=sandbox.judge_env(tmp), cwd=tmp,
                                 capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise JudgeInterpreterError(f"the judges' Python {python} could not be run to check its modules: "
                                        f"{err}") from None
    if out.returncode != 0:
        raise JudgeInterpreterError(f"the judges' Python {python} failed to check its modules "
                                    f"(exit code {out.returncode}): {out.stderr.strip()[-500:]}")
    return tuple(out.stdout.split())


def require(required: tuple[str, ...] | None = None, python: str = "") -> None:
    """Raise JudgeInterpreterError when a judge started from ``python`` could not import ``required``
    (default ``REQUIRED``)."""
    missing = missing_modules(REQUIRED if required is None else required, python)
    if missing:
        python = python or sys.executable
        what = ", ".join(missing)
        raise JudgeInterpreterError(
            f"the judges' Python {python} cannot import {what} (a judge runs it with the project on "
            f"PYTHONPATH and no user site-packages): run evalfarm with the Python of the environment that "
            f"has {what} installed (e.g. activate its virtual environment), or install {what} for {python}")
