"""One-line descriptions of config fields, read from the config files' own comments.

A config file sets fields as ``c.<section>.<field> = value``; the comment at the end of that
line is the field's description (configs/common.py gives every field one). A field whose line
has no comment takes the first sentence of the comment lines right above it. `learner train
--help` prints the descriptions beside each field's default (learner.config_check.describe_fields).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path


def common_config_file() -> Path:
    """configs/common.py, the file every config starts from."""
    import configs.common

    return Path(configs.common.__file__)


def _comments(source: str) -> dict[int, tuple[str, bool]]:
    """Line number -> (comment text, whether the line holds only the comment)."""
    out: dict[int, tuple[str, bool]] = {}
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row = tok.start[0]
            alone = lines[row - 1][: tok.start[1]].strip() == ""
            out[row] = (tok.string.lstrip("#").strip(), alone)
    return out


def _path(node: ast.expr) -> str | None:
    """``a.b.c`` for ``c.a.b.c`` (an attribute chain on the config variable), else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join(reversed(parts)) if isinstance(node, ast.Name) and parts else None


def _first_sentence(text: str) -> str:
    m = re.match(r"(.+?[.;])(\s|$)", text)
    return (m.group(1) if m else text).rstrip(".;").strip()


def field_descriptions(path: str | Path) -> dict[str, str]:
    """Field path ("rl.group_size") -> its one-line description, for the fields ``path`` sets."""
    source = Path(path).read_text(encoding="utf-8")
    comments = _comments(source)
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        field = _path(node.targets[0])
        if field is None:
            continue
        trailing = comments.get(node.lineno)
        if trailing is not None and not trailing[1] and trailing[0]:
            out[field] = trailing[0]
            continue
        above, row = [], node.lineno - 1
        while row in comments and comments[row][1]:
            above.insert(0, comments[row][0])
            row -= 1
        if above:
            out[field] = _first_sentence(" ".join(above))
    return out


def descriptions_for(*config_files: str | Path) -> dict[str, str]:
    """Descriptions of every field configs/common.py defines, then of the fields only a later
    file adds (a file's comment on a field common.py has is a note on its value, not the field's
    description)."""
    out = field_descriptions(common_config_file())
    for f in config_files:
        for field, text in field_descriptions(f).items():
            out.setdefault(field, text)
    return out
