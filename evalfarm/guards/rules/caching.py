"""Caching across calls: remembering inputs or outputs (by identity, pointer, version or a
value fingerprint) to skip work on a repeated call. Runtime: fresh inputs for every timed
call, outputs audited, memory poisoned between calls -- a cache never hits. Role: testifies.

Reported only for state derived from the *values* of forward's inputs (tensor metadata such as
``x.shape``/``x.device`` and allocations ``like`` an input excluded): keeping a parameter or a
derived weight (``self._wt = self.weight.t().contiguous()``), reading ``.data_ptr()`` for an
alignment check or ``._version`` to refresh a derived weight is not caching.
"""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import cpp_rule, self_attr, short

RULE_IDS = ("caching",)

CPP = (
    cpp_rule("caching", r"\bstatic\s+(?:const\s+)?(?:torch|at)\s*::\s*Tensor\b|"
             r"\bstatic\s+std\s*::\s*(?:unordered_)?map\s*<\s*(?:const\s+)?(?:void|float|"
             r"int64_t|uintptr_t|at\s*::\s*Tensor)",
             "keeps tensors (or pointer-keyed maps) alive across calls in a static variable"),
)

_MUTATING = {"update", "setdefault", "append", "extend", "insert", "add", "__setitem__",
             "move_to_end", "appendleft", "extendleft", "put"}
_IDENTITY_METHODS = {"data_ptr", "untyped_storage", "storage", "_cdata", "unsafe_get"}
_REDUCTIONS = {"sum", "mean", "norm", "max", "min", "abs", "prod", "std", "var", "amax", "amin"}
_WRAPPERS = {"hash", "tuple", "str", "frozenset", "repr", "int", "id"}
_LOOKUPS = {"get", "setdefault", "pop", "__contains__", "__getitem__", "add", "append", "index",
            "count"}


def _parents(eng: Any, fn: ast.AST) -> dict[int, ast.AST]:
    cache = eng.__dict__.setdefault("_caching_parents", {})
    got = cache.get(id(fn))
    if got is None:
        got = {}
        for p in ast.walk(fn):
            for c in ast.iter_child_nodes(p):
                got[id(c)] = p
        cache[id(fn)] = got
    return got


def _stateful(eng: Any, node: ast.AST) -> bool:
    """Is this expression state that outlives the call (self.x, a module container)?"""
    if self_attr(node) is not None:
        return True
    return isinstance(node, ast.Name) and node.id in eng.index.module_containers


def _key_use(eng: Any, node: ast.AST, depth: int = 0) -> bool:
    """Is the value of ``node`` used as a key to recognise a call (lookup, comparison with
    stored state, stored on self)? Arithmetic such as ``ptr % 16`` is not."""
    fn = eng.current_method()
    if fn is None or depth > 3:
        return False
    parents = _parents(eng, fn)
    child, p = node, parents.get(id(node))
    while p is not None:
        wrapped = isinstance(p, ast.Tuple | ast.List | ast.Set | ast.JoinedStr | ast.FormattedValue)
        combined = isinstance(p, ast.BinOp) and isinstance(p.op, ast.Add | ast.Mult | ast.BitXor)
        converted = isinstance(p, ast.Call) and child in p.args \
            and (eng.index.resolve(p.func) or "") in _WRAPPERS
        chained = (isinstance(p, ast.Attribute) and child is p.value) or (
            isinstance(p, ast.Call) and child is p.func)
        if wrapped or combined or converted or chained:
            child, p = p, parents.get(id(p))
            continue
        break
    if p is None:
        return False
    if isinstance(p, ast.Subscript) and child is p.slice:
        return True
    if isinstance(p, ast.Dict) and child in p.keys:
        return True
    if isinstance(p, ast.Compare):
        if any(isinstance(op, ast.In | ast.NotIn) for op in p.ops):
            return True
        others = [p.left, *p.comparators]
        return any(o is not child and _stateful(eng, o) for o in others)
    if isinstance(p, ast.Call) and isinstance(p.func, ast.Attribute) and child in p.args \
            and p.func.attr in _LOOKUPS and _stateful(eng, p.func.value):
        return True
    if isinstance(p, ast.Assign | ast.AnnAssign | ast.NamedExpr):
        targets = p.targets if isinstance(p, ast.Assign) else [p.target]
        for t in targets:
            if self_attr(t) is not None:
                return True
            if isinstance(t, ast.Name):
                for use in ast.walk(fn):
                    if isinstance(use, ast.Name) and use.id == t.id \
                            and isinstance(use.ctx, ast.Load) and _key_use(eng, use, depth + 1):
                        return True
    return False


def on_function(eng: Any, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = eng.index.resolve(target) or ""
        if name in ("functools.lru_cache", "functools.cache", "functools.cached_property"):
            params = [a for a in node.args.args if a.arg not in ("self", "cls")]
            if params or node.args.vararg or node.args.kwarg or node.args.kwonlyargs:
                eng.add("caching", dec,
                        f"@{name} on {node.name}() memoises results across calls "
                        "(tensors hash by identity, so repeated inputs hit the cache)")


def on_global(eng: Any, node: ast.Global) -> None:
    method = eng.current_method()
    if not eng.in_hot() or method is None:
        return
    names, inputs = set(node.names), eng.inputs()
    for sub in ast.walk(method):
        if isinstance(sub, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            hit = [t.id for t in targets if isinstance(t, ast.Name) and t.id in names]
            if hit and sub.value is not None and eng.index.refs(sub.value, inputs):
                eng.add("caching", sub, f"forward assigns global {hit[0]} = "
                        f"<{short(sub.value)}>: input-derived state kept across calls")


def on_self_store(eng: Any, attr: str, value: ast.AST | None, stmt: ast.AST,
                  augmented: bool) -> None:
    if not eng.in_hot() or value is None:
        return
    if eng.index.refs(value, eng.inputs()):
        eng.add("caching", stmt, f"forward assigns self.{attr} = <{short(value)}>: "
                "input-derived state kept across calls")


def on_subscript_store(eng: Any, target: ast.Subscript, base: str | None, value: Any,
                       stmt: ast.AST) -> None:
    if not eng.in_hot():
        return
    inner, inputs = target.value, eng.inputs()
    if not (eng.index.refs(target.slice, inputs) or eng.index.refs(value, inputs)):
        return
    attr = self_attr(inner)
    if attr is not None:
        eng.add("caching", stmt,
                f"forward stores into self.{attr}[...]: input-derived state kept across calls")
    elif isinstance(inner, ast.Name) and inner.id in eng.index.module_containers:
        eng.add("caching", stmt,
                f"forward stores into module-level {inner.id}[...]: state across calls")


def on_return(eng: Any, node: ast.Return) -> None:
    method = eng.current_method()
    if method is None or id(method) not in eng.index.hot or method.name != "forward" \
            or node.value is None:
        return
    vals = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
    for v in vals:
        inner = v
        while isinstance(inner, ast.Subscript | ast.Call) and not self_attr(inner):
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) \
                    and inner.func.attr in ("view", "reshape", "view_as", "reshape_as",
                                            "narrow", "squeeze", "unsqueeze", "transpose",
                                            "permute", "t", "flatten", "expand", "as_strided",
                                            "detach"):
                inner = inner.func.value
            elif isinstance(inner, ast.Subscript):
                inner = inner.value
            else:
                break
        attr = self_attr(inner)
        if attr and attr not in eng.index.compiled_attrs:
            eng.add("caching", node,
                    f"forward returns self.{attr}, a tensor stored on self; later calls "
                    "overwrite earlier results")


def on_attribute(eng: Any, node: ast.Attribute) -> None:
    if node.attr in ("_version", "_cdata") and isinstance(node.ctx, ast.Load) and eng.in_hot() \
            and eng.index.refs(node.value, eng.inputs()) and _key_use(eng, node):
        eng.add("caching", node, f".{node.attr} of an input used as a key: recognises a "
                "repeated input")


def on_call(eng: Any, node: ast.Call, fn: str | None, method: str | None) -> None:
    if not eng.in_hot():
        return
    inputs = eng.inputs()
    refs = eng.index.refs
    if fn in ("id", "hash") and fn not in eng.index.local_names and node.args \
            and refs(node.args[0], inputs) and _key_use(eng, node):
        eng.add("caching", node, f"{fn}() of an input used as a key (identity cache)")
    if fn == "globals":
        eng.add("caching", node, "globals() in forward: module state across calls")
    if not isinstance(node.func, ast.Attribute):
        return
    recv = node.func.value
    if method in _IDENTITY_METHODS and refs(recv, inputs) and _key_use(eng, node):
        eng.add("caching", node, f".{method}() of an input used as a key: pointer/storage "
                "identity recognises a repeated input")
    if method == "item" and isinstance(recv, ast.Call) and isinstance(recv.func, ast.Attribute) \
            and recv.func.attr in _REDUCTIONS and refs(recv, inputs) and _key_use(eng, node):
        eng.add("caching", node, f".{recv.func.attr}().item() of an input used as a key: a "
                "value fingerprint")
    if method in _MUTATING and _stateful(eng, recv) \
            and any(refs(a, inputs) for a in [*node.args, *(k.value for k in node.keywords)]):
        what = f"self.{self_attr(recv)}" if self_attr(recv) else f"module-level {short(recv)}"
        eng.add("caching", node, f"forward puts input-derived values into {what}.{method}(): "
                "state kept across calls")
