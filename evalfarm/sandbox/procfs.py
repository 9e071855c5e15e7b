"""Reading a process's ``/proc/<pid>`` files: the one parser for ``stat`` and for ``cmdline``."""

from __future__ import annotations


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, so index 0 is the state, 1 the
    parent pid, 2 the process group, 11 and 12 user and system CPU ticks (``man 5 proc`` numbers
    them from 3 there); None when the process is gone or the file cannot be read. The command name
    may hold spaces and parentheses: the fields start after the last ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    end = data.rfind(b")")
    return data[end + 1:].decode("ascii", "replace").split() if end >= 0 else None


def cmdline(pid: int | str) -> bytes:
    """``/proc/<pid>/cmdline`` with its NUL separators as spaces; b"" when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ")
    except OSError:
        return b""
