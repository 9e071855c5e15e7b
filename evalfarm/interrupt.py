"""Ctrl-C and SIGTERM for the `evalfarm` commands: no traceback, nothing left running.

``install()`` makes SIGINT and SIGTERM raise ``Interrupted`` in the main thread. Code on the way
out ends what it started (``evalfarm.scoring.waiting`` cancels its evaluation, the build pool is
closed, ...), and the command that knows what was done raises ``Interrupted`` again with one line
to say it (``3 of 5 results in run.jsonl; run the same command to resume``); ``evalfarm.cli.main``
prints that line and exits ``EXIT_INTERRUPTED``. A second signal while that cleanup runs is
ignored, so the cleanup is not cut short.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The command was stopped by SIGINT or SIGTERM; ``summary`` says what was done."""

    def __init__(self, summary: str = "") -> None:
        super().__init__(summary)
        self.summary = summary


def _raise(signum: int, frame: FrameType | None) -> None:
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted()


def install() -> Callable[[], None]:
    """SIGINT and SIGTERM raise Interrupted (call from the main thread); returns what puts the
    handlers before it back."""
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, _raise)

    def restore() -> None:
        for sig, handler in before.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    return restore


def summary_of(err: BaseException) -> str:
    """The one line to print for an interrupted command."""
    text = err.summary if isinstance(err, Interrupted) else ""
    return f"interrupted: {text}" if text else "interrupted"
