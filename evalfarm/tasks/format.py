"""The KernelBench task and candidate format.

A *task* is a Python file with ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()``, with module-level hyperparameters. A *candidate* is a Python
file with ``class ModelNew`` taking the same constructor arguments.

Tasks may also carry ``SIZE_PROFILES = {"small": {"batch_size": 4, ...}}``: named sets of
module-level hyperparameter overrides. The farm uses "small" on CPU so a task sized for a
GPU stays quick there. Candidates must take sizes from their inputs, never from globals.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import linecache
import sys
import types
from pathlib import Path
from typing import Any


class TaskFormatError(ValueError):
    """A task or candidate file does not follow the format; the message says what is wrong."""


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    source: str
    path: str | None = None
    level: int | None = None
    size_profiles: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict, hash=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def resolve_profile(self, requested: str, device: str) -> str:
        """The size profile to use: 'default' (the file as written) or a named override set."""
        if requested == "auto":
            return "small" if device == "cpu" and "small" in self.size_profiles else "default"
        if requested != "default" and requested not in self.size_profiles:
            have = ", ".join(["default", *self.size_profiles]) or "default"
            raise TaskFormatError(f"task {self.name} has no size profile {requested!r} (has: {have})")
        return requested


@dataclasses.dataclass(frozen=True)
class Candidate:
    source: str
    name: str = "candidate"
    path: str | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


def _parse(source: str, what: str, name: str) -> ast.Module:
    if not source.strip():
        raise TaskFormatError(f"{what} {name} is empty")
    try:
        return ast.parse(source, filename=name)
    except SyntaxError as err:
        raise TaskFormatError(
            f"{what} {name} is not valid Python: line {err.lineno}: {err.msg}"
        ) from None
    except (RecursionError, MemoryError, ValueError) as err:  # too deep to parse; NUL bytes
        raise TaskFormatError(f"{what} {name} cannot be parsed: {type(err).__name__}: {err}") from None


def _top_level_names(tree: ast.Module) -> tuple[set[str], set[str], set[str]]:
    classes, functions, assigned = set(), set(), set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes.add(node.name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.add(target.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            assigned.add(node.target.id)
    return classes, functions, assigned


_BIN_OPS: dict[type, Any] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a / b, ast.Mod: lambda a, b: a % b,
    ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b,
}
_MAX_CONSTANT = 1 << 62


def _constant_eval(node: ast.expr) -> Any:
    """A literal, allowing + - * / // % << >> on numbers (``1 << 14``), with bounded results."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("dict unpacking is not a constant")
        return {_constant_eval(k): _constant_eval(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.List | ast.Tuple):
        items = [_constant_eval(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _constant_eval(node.operand)
        if not isinstance(v, int | float):
            raise ValueError("unary operator on a non-number")
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN_OPS:
        a, b = _constant_eval(node.left), _constant_eval(node.right)
        if not (isinstance(a, int | float) and isinstance(b, int | float)):
            raise ValueError("arithmetic on a non-number")
        if isinstance(node.op, ast.LShift) and not 0 <= b <= 62:
            raise ValueError("shift out of range")
        try:
            v = _BIN_OPS[type(node.op)](a, b)
        except (ZeroDivisionError, OverflowError, TypeError):
            raise ValueError("bad arithmetic") from None
        if abs(v) > _MAX_CONSTANT:
            raise ValueError("constant too large")
        return v
    raise ValueError("not a constant expression")


def _literal_profiles(tree: ast.Module, name: str) -> dict[str, dict[str, Any]]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "SIZE_PROFILES" for t in node.targets
        ):
            try:
                value = _constant_eval(node.value)
            except (ValueError, RecursionError):  # RecursionError: an expression too deep to evaluate
                raise TaskFormatError(
                    f"task {name}: SIZE_PROFILES must be a literal dict of dicts (of plain constants)"
                ) from None
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, dict) for k, v in value.items()
            ):
                raise TaskFormatError(f"task {name}: SIZE_PROFILES must map names to dicts")
            return value
    return {}


def parse_task(source: str, name: str, path: str | None = None, level: int | None = None) -> Task:
    """Check a task's structure without running it."""
    tree = _parse(source, "task", name)
    classes, functions, _ = _top_level_names(tree)
    missing = []
    if "Model" not in classes:
        missing.append("class Model(nn.Module)")
    for fn in ("get_inputs", "get_init_inputs"):
        if fn not in functions:
            missing.append(f"def {fn}()")
    if missing:
        raise TaskFormatError(f"task {name} is missing: {', '.join(missing)}")
    profiles = _literal_profiles(tree, name)
    return Task(name=name, source=source, path=path, level=level, size_profiles=profiles)


def parse_candidate(source: str, name: str = "candidate", path: str | None = None) -> Candidate:
    """Check a candidate's structure without running it."""
    tree = _parse(source, "candidate", name)
    classes, _, assigned = _top_level_names(tree)
    if "ModelNew" not in classes and "ModelNew" not in assigned:
        raise TaskFormatError(f"candidate {name} is missing: class ModelNew(nn.Module)")
    return Candidate(source=source, name=name, path=path)


def read_source(path: str | Path, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise TaskFormatError(f"{what} file not found: {p}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TaskFormatError(f"{what} file is not valid UTF-8: {p}") from None


def load_task_file(path: str | Path, name: str | None = None, level: int | None = None) -> Task:
    p = Path(path)
    return parse_task(read_source(p, "task"), name or p.stem, path=str(p), level=level)


def load_candidate_file(path: str | Path) -> Candidate:
    p = Path(path)
    return parse_candidate(read_source(p, "candidate"), p.stem, path=str(p))


def exec_module(source: str, module_name: str, filename: str) -> types.ModuleType:
    """Execute source as a fresh module registered in sys.modules (dataclasses and pickling need it).

    The source is also registered with ``linecache`` under ``filename``, so ``inspect.getsource``
    works on what it defines: Triton's ``@triton.jit`` reads a kernel's source that way, and
    tracebacks show the lines."""
    module = types.ModuleType(module_name)
    module.__file__ = filename
    sys.modules[module_name] = module
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    code = compile(source, filename, "exec")
    exec(code, module.__dict__)  # noqa: S102 - running task/candidate code is the point
    return module


def instantiate_task(task: Task, profile: str) -> types.ModuleType:
    """Run the task file and apply the size profile's overrides to its globals."""
    module = exec_module(task.source, f"evalfarm_task_{task.sha256[:16]}", task.path or task.name)
    for fn in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, fn, None)):
            raise TaskFormatError(f"task {task.name}: {fn} is not callable")
    if profile != "default":
        for key, value in task.size_profiles[profile].items():
            if key not in module.__dict__:
                raise TaskFormatError(
                    f"task {task.name}: size profile {profile!r} overrides unknown global {key!r}"
                )
            module.__dict__[key] = value
    return module
