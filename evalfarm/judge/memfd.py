"""Unnamed shared-memory files for a worker's arenas and staging area (no torch here: the judge's
launcher makes them before it imports torch; evalfarm.judge.worker_processes)."""

from __future__ import annotations

import os

MEMFD_NAME = "evalfarm-arena"


def new_arena_fd() -> int:
    """An empty, unnamed shared-memory file, closed on exec and sealable; sized by its user."""
    return os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
