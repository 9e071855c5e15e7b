"""Metrics sink for training runs: one JSON object per line, plus optional TensorBoard scalars.

    with MetricsWriter("runs/exp1") as mw:
        mw.write(step, {"loss": 0.7, "reward_mean": 0.3}, stage="rl")

Each `write` appends ``{"step": ..., "stage": ..., "time": ..., **metrics}`` to
``<logdir>/metrics.jsonl`` and flushes it, so a killed run loses nothing already written. Non-finite
floats are stored as JSON ``null`` (the file stays strict JSON). Reopening an existing file (a
resumed run) appends after the earlier lines; a partial last line left by a run killed mid-write is
dropped first so that the first new record does not get glued onto it.

TensorBoard scalars are named ``<stage>/<key>`` and go to ``<logdir>/tb`` when tensorboardX is
installed (non-finite values are left out there: the JSON ``null`` records them); without
tensorboardX the JSON lines are still written and a warning is logged once.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

log = logging.getLogger(__name__)

RESERVED_KEYS = frozenset({"step", "stage", "time"})

_tb_warned = False


def _warn_no_tensorboard(reason: str) -> None:
    global _tb_warned
    if not _tb_warned:
        _tb_warned = True
        log.warning("TensorBoard logging disabled (%s); writing metrics.jsonl only", reason)


def _to_number(key: str, value: Any) -> int | float:
    """A JSON-able Python number for a metric value (Python, numpy or JAX scalar)."""
    if isinstance(value, str | bytes):
        raise TypeError(f"metric {key!r}: expected a real scalar, got {type(value).__name__}")
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, numbers.Integral):  # numpy integer types
        return int(value)
    try:
        return float(value)  # float, numpy floating, 0-d numpy / JAX arrays
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"metric {key!r}: expected a real scalar, got {type(value).__name__}: {value!r}"
        ) from e


def _json_value(v: int | float) -> int | float | None:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _repair_tail(path: Path) -> None:
    """Make sure an existing file ends with a newline before appending to it.

    A run killed mid-write can leave a partial last line. If that line still parses it only lacks
    its newline, which is added; otherwise it is unrecoverable and is cut off.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with path.open("rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        # Find the start of the last line.
        block = 1 << 16
        pos = size
        start = 0
        while pos > 0:
            lo = max(0, pos - block)
            f.seek(lo)
            chunk = f.read(pos - lo)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                start = lo + nl + 1
                break
            pos = lo
        f.seek(start)
        tail = f.read()
        try:
            json.loads(tail)
        except ValueError:
            log.warning(
                "%s: dropping a truncated last line (%d bytes) left by an interrupted run",
                path,
                len(tail),
            )
            f.truncate(start)
        else:
            f.seek(size)
            f.write(b"\n")


class MetricsWriter:
    """Appends metrics to ``<logdir>/metrics.jsonl`` (and TensorBoard under ``<logdir>/tb``)."""

    def __init__(
        self,
        logdir: str | Path,
        *,
        tensorboard: bool = True,
        jsonl_name: str = "metrics.jsonl",
    ) -> None:
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.logdir / jsonl_name
        _repair_tail(self.jsonl_path)
        self._lock = threading.Lock()
        self._file = self.jsonl_path.open("a", encoding="utf-8")
        self._closed = False
        self._tb: Any = None
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ImportError as e:
                _warn_no_tensorboard(f"tensorboardX not importable: {e}")
            else:
                self._tb = SummaryWriter(logdir=str(self.logdir / "tb"))

    @property
    def tensorboard_enabled(self) -> bool:
        return self._tb is not None

    def write(self, step: int, metrics: Mapping[str, float | int], *, stage: str) -> None:
        """Record `metrics` at `step` for `stage`; the JSON line is on disk when this returns."""
        if self._closed:
            raise ValueError("MetricsWriter is closed")
        step = int(step)
        values: dict[str, int | float] = {}
        for key, value in metrics.items():
            key = str(key)
            if key in RESERVED_KEYS:
                raise ValueError(f"metric name {key!r} is reserved ({sorted(RESERVED_KEYS)})")
            values[key] = _to_number(key, value)
        now = time.time()
        record: dict[str, Any] = {"step": step, "stage": stage, "time": now}
        record.update({k: _json_value(v) for k, v in values.items()})
        line = json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()
            if self._tb is not None:
                for key, v in values.items():
                    if math.isfinite(v):  # tensorboardX logs a warning per non-finite scalar
                        self._tb.add_scalar(
                            f"{stage}/{key}", float(v), global_step=step, walltime=now
                        )

    def flush(self) -> None:
        """Flush TensorBoard events (the JSON lines are flushed on every write)."""
        with self._lock:
            if self._closed:
                return
            self._file.flush()
            os.fsync(self._file.fileno())
            if self._tb is not None:
                self._tb.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._file.close()
            finally:
                if self._tb is not None:
                    self._tb.close()
                    self._tb = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a metrics.jsonl file.

    A malformed *last* line (a run killed mid-write) is skipped with a warning; a malformed line
    anywhere else is real corruption and raises `ValueError`. Blank lines are ignored.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    out: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            if i == len(lines) - 1:
                log.warning("%s: ignoring a truncated last line (%d chars)", path, len(line))
                break
            raise ValueError(f"{path}:{i + 1}: malformed JSON line: {e}") from e
        if not isinstance(rec, dict):
            raise ValueError(f"{path}:{i + 1}: expected a JSON object, got {type(rec).__name__}")
        out.append(rec)
    return out
