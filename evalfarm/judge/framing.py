"""Framing between processes over a socket pair.

Messages are JSON objects in length-prefixed frames (``multiprocessing.connection`` framing).
Nothing received from the candidate's side is ever unpickled: a frame is parsed as JSON,
bounded in size, and checked against the fields the reader expects. The judge-to-worker
direction may carry pickled payloads (the worker trusts the judge), used only for CUDA
IPC handles.
"""

from __future__ import annotations

import json
import pickle
import select
import socket
import time
from multiprocessing.connection import Connection
from typing import Any

MAX_FRAME_BYTES = 64 << 20


class ProtocolError(RuntimeError):
    """The peer sent something that is not a well-formed message."""


class PeerClosed(EOFError):
    """The peer closed the channel (exited or crashed)."""


def channel_pair() -> tuple[Connection, socket.socket]:
    """(our end as a Connection, the child's raw socket, to pass via pass_fds)."""
    ours, theirs = socket.socketpair()
    conn = Connection(ours.detach())
    return conn, theirs


def send_json(conn: Connection, msg: dict[str, Any]) -> None:
    conn.send_bytes(json.dumps(msg, allow_nan=True).encode())


def spin_until_readable(conn: Connection, spin_s: float) -> bool:
    """Poll ``conn`` without sleeping for up to ``spin_s`` seconds: whether a frame has begun to
    arrive. A reply that comes within the spin is read without the wake-up from a blocking wait."""
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    deadline = time.perf_counter() + spin_s
    while not poller.poll(0):
        if time.perf_counter() >= deadline:
            return False
    return True


def recv_json(conn: Connection, timeout: float | None, spin_s: float = 0.0) -> dict[str, Any]:
    """Wait up to timeout seconds for one JSON object; TimeoutError if none arrives. ``spin_s``:
    the first part of the wait (at most the timeout) polls without sleeping."""
    spun = 0.0
    if spin_s > 0:
        spin_s = spin_s if timeout is None else min(spin_s, max(timeout, 0.0))
        t0 = time.perf_counter()
        if spin_until_readable(conn, spin_s):
            timeout = None  # a frame is there: read it
        spun = time.perf_counter() - t0
    if timeout is not None and not conn.poll(max(timeout - spun, 0.0)):
        raise TimeoutError
    try:
        data = conn.recv_bytes(MAX_FRAME_BYTES)
    except (EOFError, ConnectionResetError, BrokenPipeError):
        raise PeerClosed from None
    except OSError as err:
        raise ProtocolError(f"bad frame: {err}") from None
    try:
        msg = json.loads(data)
    except ValueError:
        raise ProtocolError("frame is not JSON") from None
    if not isinstance(msg, dict):
        raise ProtocolError("frame is not a JSON object")
    return msg


def send_pickle(conn: Connection, obj: Any) -> None:
    """Trusted direction only (judge to worker)."""
    conn.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def recv_pickle(conn: Connection) -> Any:
    try:
        return pickle.loads(conn.recv_bytes())  # noqa: S301 - from the trusted judge
    except (EOFError, ConnectionResetError):
        raise PeerClosed from None
