"""Files.

``filesystem`` (blocks): destructive operations (remove, rename, chmod, links, truncate, fifos)
-- unsafe to run: what they destroy outside the worker's build directory is gone before any
verdict. ``file_access`` (testifies): reading, creating and writing files (build directories,
temporary files, ``torch.load``, mmap, /dev/shm); the worker runs with a file-size limit and
its own namespaces, and answers stored on disk cannot match fresh inputs.
"""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import cpp_rule, name_rules

RULE_IDS = ("filesystem", "file_access")

NAMES = name_rules(
    "filesystem",
    [
        "shutil.rmtree", "shutil.move", "os.remove", "os.unlink", "os.rmdir", "os.removedirs",
        "os.rename", "os.renames", "os.replace", "os.chmod", "os.chown", "os.lchown",
        "os.symlink", "os.link", "os.truncate", "os.ftruncate", "os.mknod", "os.mkfifo",
        "os.fchmod", "os.fchown",
    ],
    "destructive filesystem operation",
)
NAMES |= name_rules(
    "file_access",
    [
        "shutil", "tempfile", "os.makedirs", "os.mkdir", "os.open", "os.memfd_create",
        "torch.save", "torch.load", "numpy.save", "numpy.savez", "numpy.savez_compressed",
        "numpy.load", "numpy.fromfile", "numpy.memmap", "mmap", "shelve", "dbm", "sqlite3",
        "io.FileIO", "fcntl",
    ],
    "reads or creates files",
)

CPP = (
    cpp_rule("filesystem", r"(?<![\w.>:])(?:unlink|unlinkat|rmdir|rename|renameat|remove|chmod|"
             r"chown|truncate|ftruncate|symlink|link|mkfifo|mknod)\s*\(|"
             r"\bstd\s*::\s*filesystem\s*::\s*(?:remove\w*|rename|permissions)\b",
             "destructive filesystem operation from C++"),
    cpp_rule("file_access", r"\bfopen\s*\(|\bstd\s*::\s*[io]?fstream\b|/dev/shm|\bshm_open\b|"
             r"\bmmap\s*\(",
             "touches files / shared memory from C++"),
)

_OPEN = ("open", "io.open", "builtins.open", "os.fdopen", "codecs.open")
_DESTRUCTIVE_PATH = ("unlink", "rmdir", "symlink_to", "hardlink_to")
_WRITING_PATH = ("write_text", "write_bytes", "touch", "mkdir")


def on_call(eng: Any, node: ast.Call, fn: str | None, method: str | None) -> None:
    if method in _DESTRUCTIVE_PATH and fn is None:
        eng.add("filesystem", node, f".{method}() changes or removes files")
        return
    if method in _WRITING_PATH and fn is None:
        eng.add("file_access", node, f".{method}() writes to the filesystem")
        return
    if fn not in _OPEN:
        return
    mode_node: ast.expr | None = node.args[1] if len(node.args) > 1 else None
    for kw in node.keywords:
        if kw.arg == "mode":
            mode_node = kw.value
    mode = eng.index.const_str(mode_node) if mode_node is not None else "r"
    path = eng.index.const_str(node.args[0]) if node.args else None
    if mode is None:
        eng.add("file_access", node, f"{fn}() with a computed mode")
    elif any(c in mode for c in "wax+"):
        eng.add("file_access", node, f"{fn}(..., {mode!r}) writes a file")
    if path is not None and path.startswith(("/dev/shm", "/proc", "/sys", "/dev/")):
        eng.add("file_access", node, f"{fn}({path!r}) opens a shared/system path")
