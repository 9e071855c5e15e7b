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
import socket
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


def recv_json(conn: Connection, timeout: float | None) -> dict[str, Any]:
    """Wait up to timeout seconds for one JSON object; TimeoutError if none arrives."""
    if timeout is not None and not conn.poll(max(timeout, 0.0)):
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
