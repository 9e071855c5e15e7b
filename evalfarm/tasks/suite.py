"""Finding tasks: the built-in suite, a KernelBench checkout, or a file.

Both the built-in suite and a KernelBench checkout use the layout
``level<L>/<id>_<Name>.py``; a task is addressed as ``L<L>/<id>``, by its file stem
(``19_ReLU``) or by its name (``ReLU``, case-insensitive).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from evalfarm.tasks.format import (
    Candidate,
    Task,
    TaskFormatError,
    load_candidate_file,
    load_task_file,
)

BUILTIN_ROOT = Path(__file__).parent / "builtin"
_FILE_RE = re.compile(r"^(\d+)_(\w+)\.py$")
_ID_RE = re.compile(r"^[Ll](\d+)/(\d+)$")


class UnknownTaskError(TaskFormatError):
    """No task matches the given name, id or path."""


@dataclasses.dataclass(frozen=True)
class TaskEntry:
    level: int
    number: int
    name: str  # e.g. "ReLU"
    path: Path

    @property
    def task_id(self) -> str:
        return f"L{self.level}/{self.number}"

    @property
    def stem(self) -> str:
        return self.path.stem


@dataclasses.dataclass(frozen=True)
class Variant:
    """A candidate shipped with a built-in task: 'fast' (correct, faster) or 'wrong' (subtly incorrect)."""

    kind: str  # "fast" | "wrong"
    devices: str  # "any" | "cpu" | "cuda"
    label: str
    path: Path

    def runs_on(self, device: str) -> bool:
        return self.devices == "any" or device.startswith(self.devices)

    def load(self) -> Candidate:
        return load_candidate_file(self.path)


class TaskSuite:
    """A directory tree of ``level<L>/<id>_<Name>.py`` task files."""

    def __init__(self, root: Path, label: str) -> None:
        self.root = Path(root)
        self.label = label
        entries = []
        for level_dir in sorted(self.root.glob("level[0-9]*")):
            level = int(level_dir.name[5:])
            for f in sorted(level_dir.glob("*.py")):
                m = _FILE_RE.match(f.name)
                if m:
                    entries.append(TaskEntry(level, int(m.group(1)), m.group(2), f))
        self.entries = sorted(entries, key=lambda e: (e.level, e.number))

    def find(self, key: str) -> TaskEntry:
        m = _ID_RE.match(key)
        for e in self.entries:
            if m and (e.level, e.number) == (int(m.group(1)), int(m.group(2))):
                return e
            if key in (e.stem, e.task_id) or key.lower() == e.name.lower():
                return e
        raise UnknownTaskError(
            f"no task {key!r} in {self.label} (use L<level>/<id>, a file stem like 19_ReLU, or a name)"
        )

    def load(self, key: str) -> Task:
        e = self.find(key)
        return load_task_file(e.path, name=f"{e.task_id}_{e.name}", level=e.level)

    def variants(self, key: str) -> list[Variant]:
        e = self.find(key)
        vdir = self.root / "variants" / f"level{e.level}" / e.stem
        out = []
        for f in sorted(vdir.glob("*.py")):
            parts = f.stem.split("_", 2)
            if len(parts) == 3 and parts[0] in ("fast", "wrong") and parts[1] in ("any", "cpu", "cuda"):
                out.append(Variant(parts[0], parts[1], parts[2], f))
        return out


def builtin_suite() -> TaskSuite:
    return TaskSuite(BUILTIN_ROOT, "the built-in suite")


def kernelbench_suite(root: str | Path) -> TaskSuite:
    """A KernelBench checkout: ``<root>/KernelBench/level1/19_ReLU.py``."""
    root = Path(root)
    inner = root / "KernelBench"
    if not inner.is_dir():
        if any(root.glob("level[0-9]*")):
            inner = root
        else:
            raise UnknownTaskError(f"{root} is not a KernelBench checkout (no KernelBench/level*/ dirs)")
    return TaskSuite(inner, f"KernelBench at {root}")


def resolve_task(spec: str, kernelbench_root: str | Path | None = None) -> Task:
    """A task from a file path, a built-in id/name, or (with a root) a KernelBench id/name."""
    p = Path(spec)
    if p.suffix == ".py" or p.exists():
        return load_task_file(p)
    if kernelbench_root is not None:
        return kernelbench_suite(kernelbench_root).load(spec)
    return builtin_suite().load(spec.removeprefix("builtin:"))
