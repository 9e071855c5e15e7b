"""What a candidate's C++/CUDA sources may pull in, and what of the compiler's output it sees.

Two rules keep files of the host out of a COMPILE_ERROR detail:

* ``refused_include``: an ``#include`` of an absolute path, or of a relative one that climbs
  out of the build directory (``..``), is refused before the compiler starts, unless it lands in
  the toolchain's include directories. ``#include "/dev/zero"`` or the token file's path thus ends
  at once with a clear COMPILE_ERROR instead of a compiler reading forever or quoting the file.
* ``redact``: in the compiler's output, a diagnostic located in a file outside the build
  directory and the toolchain's include directories (reached through a computed ``#include``)
  keeps its location but not its text, and the source lines quoted under it are dropped.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig

_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
# "path:line:col: ..." or "path(line): ..." (nvcc), possibly after "In file included from ".
_LOCATED = re.compile(r"^(?P<pre>(?:In file included from|\s+from)\s+)?(?P<path>/[^:()\s]+)(?P<loc>[:(]\d+)")
_QUOTE = re.compile(r"^\s*\d*\s*\|")  # gcc/clang's quoted source lines: " 12 | text", "    | ^~~"


@functools.cache
def toolchain_include_dirs() -> tuple[str, ...]:
    """Directories whose headers a candidate may name by absolute path, and whose diagnostics it may read."""
    dirs = {"/usr/include", "/usr/local/include", "/usr/lib/gcc", "/usr/local/cuda", "/opt/nvidia",
            sysconfig.get_paths().get("include", ""), sysconfig.get_paths().get("platinclude", ""), sys.prefix,
            sys.base_prefix}
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.add(os.environ[var])
    try:
        import torch.utils.cpp_extension as cpp_ext

        dirs.update(cpp_ext.include_paths())
        dirs.add(os.path.dirname(os.path.dirname(cpp_ext.__file__)))
    except Exception:  # noqa: BLE001 - without torch, the fixed list stands
        pass
    return tuple(sorted(os.path.realpath(d) for d in dirs if d))


def _inside(path: str, roots: tuple[str, ...] | list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def refused_include(sources: list[str], build_dir: str, extra_dirs: list[str] | None = None) -> str:
    """Why these sources may not be compiled ("" when they may)."""
    allowed = (*toolchain_include_dirs(), *(os.path.realpath(d) for d in extra_dirs or []))
    for src in sources:
        for m in _INCLUDE.finditer(src):
            name = m.group(1).strip()
            if not (os.path.isabs(name) or ".." in name.split("/")):
                continue
            target = name if os.path.isabs(name) else os.path.join(build_dir, name)
            if not _inside(target, (*allowed, os.path.realpath(build_dir))):
                return (f"#include {name!r} names a file outside the extension's build directory and the "
                        "toolchain's include directories; only the candidate's own sources and system/torch/CUDA "
                        "headers may be included")
    return ""


def redact(log: str, build_dir: str) -> str:
    """The compiler's output without the text of diagnostics located in outside files."""
    allowed = (*toolchain_include_dirs(), os.path.realpath(build_dir))
    out: list[str] = []
    hiding = False
    for line in log.splitlines():
        m = _LOCATED.match(line)
        if m and not _inside(m.group("path"), allowed):
            out.append(f"{m.group('pre') or ''}{m.group('path')}{m.group('loc')}: "
                       "[withheld: a file outside the candidate's sources]")
            hiding = True
            continue
        if hiding and _QUOTE.match(line):
            continue
        hiding = False
        out.append(line)
    return "\n".join(out)
