"""Host paths out of what a daemon sends its clients.

A result's detail and evidence quote tracebacks and compiler output, which name the daemon's
checkout, its Python environment, its cache and the run directories of evaluations. None of that
is the client's business, and it maps the host for whoever submits candidates. ``HostPaths``
replaces each with a fixed name (``<project>``, ``<python>``, ``<cache>``, ``<run>``, ``<home>``)
in every text field of a result before it leaves the daemon; system directories (``/usr``) stay.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from evalfarm.sandbox import lifetime, project_root
from evalfarm.v1 import evalfarm_pb2 as pb

# Too general to name anything of this host's own: left as they are.
SYSTEM_DIRS = frozenset({"/", "/usr", "/usr/local", "/opt", "/tmp", "/var", "/home", "/root", "/etc"})
# An evaluation's or a build's run directory, wherever the temp root is, and what is below it.
_RUN_DIR = re.compile(rf"/[^\s'\"\\]*?{re.escape(lifetime.PREFIX)}[A-Za-z0-9_.-]+")


class HostPaths:
    """Replaces this host's own paths in text by their names."""

    def __init__(self, cache_dir: str | Path | None = None) -> None:
        named: dict[str, str] = {}
        for name, path in (("<home>", os.path.expanduser("~")), ("<python>", sys.base_prefix),
                           ("<python>", sys.prefix), ("<python>", sys.exec_prefix), ("<project>", project_root()),
                           ("<cache>", str(cache_dir) if cache_dir else "")):
            for form in {path, os.path.realpath(path)} if path else ():
                form = form.rstrip("/")
                if form and form not in SYSTEM_DIRS:
                    named[form] = name
        # Longest first: a checkout's .venv is <python>, not <project>/.venv.
        self._pairs = sorted(named.items(), key=lambda kv: len(kv[0]), reverse=True)
        self._pattern = re.compile("|".join(rf"{re.escape(p)}(?=[/\s'\":),\]\\]|$)" for p, _ in self._pairs)) \
            if self._pairs else None

    def __call__(self, text: str) -> str:
        text = _RUN_DIR.sub("<run>", text)
        if self._pattern is None or not text:
            return text
        names = dict(self._pairs)
        return self._pattern.sub(lambda m: names[m.group(0)], text)

    def sample(self, msg: pb.ScoredSample) -> pb.ScoredSample:
        """``msg`` with every text field that can quote a path redacted (in place; returned)."""
        msg.detail = self(msg.detail)
        msg.evidence_json = self(msg.evidence_json)
        guards = [self(g) for g in msg.evidence.guards]
        del msg.evidence.guards[:]
        msg.evidence.guards.extend(guards)
        if msg.HasField("error"):
            msg.error.message = self(msg.error.message)
        return msg
