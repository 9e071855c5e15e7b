"""`evalfarm serve --config farm.toml`: the serve flags as a TOML file.

Keys are the flag names without the leading dashes (`queue-limit` or `queue_limit`); a flag
given on the command line overrides the file. Unknown keys and values of the wrong type are
start-up errors that name the field:

    # /etc/evalfarm/farm.toml
    host = "0.0.0.0"
    port = 50051
    gpus = "all"            # or [0, 1]
    auth-token-file = "/etc/evalfarm/token"
    metrics-port = 9400
    log-format = "json"
"""

from __future__ import annotations

import argparse
import difflib
import tomllib
from pathlib import Path
from typing import Any

from evalfarm.server.config import ServerConfigError

NOT_IN_FILE = frozenset({"config", "help"})


def _expected(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "bool"
    if action.type is int:
        return "int"
    if action.type is float:
        return "float"
    return "str"


def _check(key: str, value: Any, action: argparse.Action, where: str) -> Any:
    kind = _expected(action)
    field = f"{where}: field '{key}'"
    if key == "gpus" and isinstance(value, list):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ServerConfigError(f"{field}: expected 'all' or a list of GPU indices, got {value!r}")
        value = ",".join(str(v) for v in value)
    if kind == "bool" and not isinstance(value, bool):
        raise ServerConfigError(f"{field}: expected true or false, got {value!r}")
    if kind == "int" and (not isinstance(value, int) or isinstance(value, bool)):
        raise ServerConfigError(f"{field}: expected an integer, got {value!r}")
    if kind == "float":
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ServerConfigError(f"{field}: expected a number, got {value!r}")
        value = float(value)
    if kind == "str" and not isinstance(value, str):
        raise ServerConfigError(f"{field}: expected a string, got {value!r}")
    if action.choices is not None and value not in action.choices:
        raise ServerConfigError(f"{field}: must be one of {', '.join(map(str, action.choices))}, got {value!r}")
    return value


def load_config_file(path: str | Path, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """{dest: value} from a TOML file, checked against the serve parser's flags."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise ServerConfigError(f"--config: cannot read {p}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise ServerConfigError(f"--config: {p} is not valid TOML: {err}") from None
    actions = {a.dest: a for a in parser._actions if a.dest not in NOT_IN_FILE and a.option_strings}
    out: dict[str, Any] = {}
    for key, value in data.items():
        dest = key.replace("-", "_")
        action = actions.get(dest)
        if action is None:
            known = sorted(d.replace("_", "-") for d in actions)
            close = difflib.get_close_matches(key.replace("_", "-"), known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f"; known fields: {', '.join(known)}"
            raise ServerConfigError(f"{p}: unknown field '{key}'{hint}")
        out[dest] = _check(key, value, action, str(p))
    return out
