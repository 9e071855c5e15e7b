"""Log lines a machine can parse: logfmt or JSON, UTC timestamps (RFC 3339, milliseconds, 'Z').

The farm logs events as ``log.info("event=scored sample_id=%s verdict=%s", sid, verdict)``.
The formatters here read the key of every ``key=%x`` placeholder from the format string and
pair it with its argument, so each field is emitted as a value in its own right (a string with
spaces or quotes is quoted and escaped once, never Python-repr quoted). A message that is not
of that shape is emitted whole under ``msg``.

    ts=2025-01-02T03:04:05.678Z level=info logger=evalfarm.server.service event=scored detail="a b"
    {"ts": "2025-01-02T03:04:05.678Z", "level": "info", "logger": "...", "event": "scored", ...}
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

FORMATS = ("logfmt", "json")

_SPEC = r"%[-#0 +]*(?:\d+|\*)?(?:\.\d+)?[sdirfFgGeExXoc]"
_TOKEN = re.compile(rf"(?P<key>[A-Za-z_][\w.]*)=(?:(?P<spec>{_SPEC})|(?P<lit>[^\s%]*))(?P<tail>[;,]?)$")
_NEEDS_QUOTES = re.compile(r'[\s="\\]|^$')


def utc_timestamp(created: float) -> str:
    """RFC 3339 in UTC with milliseconds: 2025-01-02T03:04:05.678Z."""
    secs = int(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{int((created - secs) * 1000):03d}Z"


def structured_fields(record: logging.LogRecord) -> dict[str, Any] | None:
    """{key: value} from a ``key=%s key2=%d ...`` message and its args; None for other shapes."""
    msg = record.msg
    if not isinstance(msg, str) or "=" not in msg:
        return None
    args = record.args if isinstance(record.args, tuple) else ((record.args,) if record.args else ())
    fields: dict[str, Any] = {}
    i = 0
    for word in msg.split():
        m = _TOKEN.match(word)
        if m is None:
            return None
        spec = m.group("spec")
        if spec is None:
            fields[m.group("key")] = m.group("lit")
            continue
        if i >= len(args):
            return None
        value = args[i]
        i += 1
        if spec[-1] in "rs":
            fields[m.group("key")] = value
        else:
            fields[m.group("key")] = _number(spec, value)
    if i != len(args):
        return None
    return fields


def _number(spec: str, value: Any) -> Any:
    """A numeric placeholder's value as a number, formatted as the message asked (%.3f -> 3 places)."""
    try:
        text = spec % value
    except (TypeError, ValueError):
        return value
    try:
        return int(text) if spec[-1] in "di" else float(text) if spec[-1] in "fFgGeE" else text
    except ValueError:
        return text


def logfmt_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = str(value)
    if not _NEEDS_QUOTES.search(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def _base(record: logging.LogRecord) -> dict[str, Any]:
    return {"ts": utc_timestamp(record.created), "level": record.levelname.lower(), "logger": record.name}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    out = _base(record)
    fields = structured_fields(record)
    if fields is None:
        out["msg"] = record.getMessage()
    else:
        for key, value in fields.items():
            out[key if key not in out else f"field_{key}"] = value
    if record.exc_info:
        out["exc"] = logging.Formatter().formatException(record.exc_info)
    return out


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={logfmt_value(v)}" for k, v in _fields(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str)


def setup_logging(level: str = "INFO", fmt: str = "logfmt", stream: Any = None) -> None:
    """Root logging to stderr (or ``stream``) in ``fmt`` ('logfmt' or 'json')."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, str(level).upper(), logging.INFO))
