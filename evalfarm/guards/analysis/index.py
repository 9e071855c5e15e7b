"""The shared name-resolution index of a candidate's module (pass 1 of the analysis).

Names are resolved through imports and simple aliases (``import torch as t``,
``from torch.cuda import Stream as S``, ``S = torch.cuda.Stream``,
``getattr(torch.cuda, "Stream")``, ``__import__("threading")``,
``importlib.import_module("threading")``, ``sys.modules["torch"]``) so that the rules see *what*
is used rather than how it is spelled. String expressions built from constants (concatenation,
f-strings, ``.format``/``.replace``/``%`` templating, module functions returning such strings)
are evaluated to the text a rule should scan.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator

from evalfarm.guards.rules.base import normalize, self_attr

_Fn = ast.FunctionDef | ast.AsyncFunctionDef

COMPILE_CALLS = (
    "torch.utils.cpp_extension", "torch.compile", "torch.jit.script", "torch.jit.trace",
    "triton", "cupy.RawKernel", "cupy.RawModule", "cupy.ElementwiseKernel",
    "cupy.ReductionKernel", "pycuda.compiler", "numba", "torch.cuda.jiterator",
    "tilelang", "cuda.core", "torch.library.custom_op",
)
BUILTINS_REF = {
    "exec", "eval", "compile", "__import__", "open", "exit", "quit", "id", "hash", "globals",
    "vars", "locals", "getattr", "setattr", "delattr", "breakpoint", "input", "help",
    "memoryview", "object", "type", "__build_class__", "__builtins__",
}
_CONTAINER_FACTORIES = ("dict", "list", "set", "OrderedDict", "defaultdict", "deque",
                        "WeakKeyDictionary", "WeakValueDictionary", "Counter", "ChainMap")
# Tensor metadata: reading it does not carry the input's values.
META_ATTRS = {"shape", "dtype", "device", "ndim", "is_cuda", "layout", "requires_grad",
              "is_contiguous", "size", "dim", "numel", "stride", "get_device", "element_size",
              "nelement", "is_floating_point", "storage_offset"}
# String methods that keep the template text (what a rule scans) without its parameters.
_TEMPLATE_METHODS = {"format", "format_map", "strip", "lstrip", "rstrip", "replace", "upper",
                     "lower", "expandtabs"}
_TEMPLATE_FUNCS = {"textwrap.dedent", "inspect.cleandoc", "str", "textwrap.indent"}
# Calls whose result depends on the arguments' metadata only (allocations "like" an input).
SHAPE_ONLY_CALLS = {"torch.empty_like", "torch.zeros_like", "torch.ones_like", "torch.empty",
                    "torch.zeros", "torch.ones", "torch.empty_strided", "torch.full",
                    "torch.randn_like", "torch.rand_like"}
SHAPE_ONLY_METHODS = {"new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided"}
_SCALAR_FUNCS = {"str", "int", "repr", "hex", "float", "bool", "len", "max", "min", "abs",
                 "round"}


class NameIndex:
    """Imports, aliases, module constants, functions, classes, the forward hot path."""

    def __init__(self, tree: ast.Module, match_rule: Callable[[str], object]) -> None:
        self.tree = tree
        self._match_rule = match_rule
        self.aliases: dict[str, str] = {}
        self.local_names: set[str] = set()
        self.str_consts: dict[str, ast.expr] = {}
        self.module_containers: set[str] = set()
        self.module_funcs: dict[str, _Fn] = {}
        self.classes: dict[str, dict[str, _Fn]] = {}
        self.hot: set[int] = set()
        self.compiled_attrs: set[str] = set()
        self.compiled_names: set[str] = set()
        self.param_attrs: set[str] = set()
        self.docstrings: set[int] = set()
        self._locals_cache: dict[int, dict[str, ast.expr]] = {}
        self._taint_cache: dict[int, set[str]] = {}
        self._calling: set[int] = set()
        self.collect()

    # ---- resolution ------------------------------------------------------------------------
    def resolve(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """Dotted name an expression refers to (through aliases), or None."""
        if node is None or depth > 50:
            return None
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            if node.id in self.local_names:
                return None if node.id != "self" else "self"
            return node.id
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value, depth + 1)
            return normalize(f"{base}.{node.attr}") if base else None
        if isinstance(node, ast.Call):
            fn = self.resolve(node.func, depth + 1)
            if fn == "getattr" and len(node.args) >= 2:
                attr = self.const_str(node.args[1])
                base = self.resolve(node.args[0], depth + 1)
                if attr is not None and base:
                    return normalize(f"{base}.{attr}")
                return None
            if fn in ("__import__", "importlib.import_module", "importlib.__import__") and node.args:
                mod = self.const_str(node.args[0])
                if mod is None:
                    return None
                fromlist = len(node.args) >= 4 or any(k.arg == "fromlist" for k in node.keywords)
                if fn == "importlib.import_module" or fromlist:
                    return normalize(mod)
                return mod.split(".")[0]
            return None
        if isinstance(node, ast.Subscript):
            base = self.resolve(node.value, depth + 1)
            key = self.const_str(node.slice)
            if base == "sys.modules" and key:
                return normalize(key)
            if base and key and base.endswith(".__dict__"):
                return normalize(f"{base[: -len('.__dict__')]}.{key}")
            return None
        return None

    def is_module_like(self, name: str) -> bool:
        root = name.split(".")[0]
        return root in {v.split(".")[0] for v in self.aliases.values()} or root in (
            "builtins", "__builtins__", "sys", "gc", "torch", "time", "os")

    # ---- strings ---------------------------------------------------------------------------
    def const_str(self, node: ast.AST | None, depth: int = 0,
                  scope: dict[str, ast.expr] | None = None, template: bool = False) -> str | None:
        """Text of a string expression built from constants, or None if it is not one.

        Templating over constants is followed: f-strings, ``.format``/``%``/``.replace``,
        ``+ str(n)``, ``"".join([...])`` and calls of module functions that return such
        strings; the unknown parameters contribute nothing to the text (the rules scan the
        template). ``scope`` maps names local to the enclosing function to their values.
        Without ``template`` (names of modules and attributes) every part must be known.
        """
        if not template:
            return self._strict_str(node, depth)
        if node is None or depth > 40:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            if scope is not None and node.id in scope and scope[node.id] is not node:
                return self.const_str(scope[node.id], depth + 1, scope, True)
            if node.id in self.str_consts:
                return self.const_str(self.str_consts[node.id], depth + 1, None, True)
            return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a = self._part(node.left, depth, scope)
            b = self._part(node.right, depth, scope)
            if a is None or b is None or (a == "" and b == "" and not (
                    self._is_str(node.left, depth, scope) or self._is_str(node.right, depth, scope))):
                return None
            return a + b
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return self.const_str(node.left, depth + 1, scope, True)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                inner = v.value if isinstance(v, ast.FormattedValue) else v
                s = self.const_str(inner, depth + 1, scope, True)
                parts.append(s or "")
            return "".join(parts)
        if isinstance(node, ast.Call):
            return self._call_str(node, depth, scope)
        if isinstance(node, ast.List | ast.Tuple):
            items = [self.const_str(e, depth + 1, scope, True) for e in node.elts]
            if items and all(i is not None for i in items):
                return "\n".join(items)  # type: ignore[arg-type]
        return None

    def _strict_str(self, node: ast.AST | None, depth: int) -> str | None:
        if node is None or depth > 40:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.str_consts:
            return self._strict_str(self.str_consts[node.id], depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a = self._strict_str(node.left, depth + 1)
            b = self._strict_str(node.right, depth + 1)
            return None if a is None or b is None else a + b
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "join" and node.args \
                and isinstance(node.args[0], ast.List | ast.Tuple):
            sep = self._strict_str(node.func.value, depth + 1)
            items = [self._strict_str(e, depth + 1) for e in node.args[0].elts]
            if sep is not None and all(i is not None for i in items):
                return sep.join(items)  # type: ignore[arg-type]
        return None

    def _is_str(self, node: ast.AST, depth: int, scope: dict[str, ast.expr] | None) -> bool:
        return self.const_str(node, depth + 1, scope, True) is not None

    def _part(self, node: ast.AST, depth: int, scope: dict[str, ast.expr] | None) -> str | None:
        """One operand of ``+``: a string, or "" for a scalar parameter of a template."""
        s = self.const_str(node, depth + 1, scope, True)
        if s is not None:
            return s
        if isinstance(node, ast.Name | ast.Attribute | ast.Subscript):
            return ""
        if isinstance(node, ast.Call) and (self.resolve(node.func) or "") in _SCALAR_FUNCS:
            return ""
        return None

    def _call_str(self, node: ast.Call, depth: int, scope: dict[str, ast.expr] | None) -> str | None:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr in _TEMPLATE_METHODS:
                base = self.const_str(func.value, depth + 1, scope, True)
                if base is not None and func.attr == "replace" and len(node.args) >= 2:
                    old = self.const_str(node.args[0], depth + 1, scope, True)
                    new = self.const_str(node.args[1], depth + 1, scope, True)
                    if old is not None:
                        return base.replace(old, new or "")
                return base
            if func.attr == "join" and node.args:
                sep = self.const_str(func.value, depth + 1, scope, True)
                seq = node.args[0]
                if sep is None:
                    return None
                if isinstance(seq, ast.List | ast.Tuple):
                    items = [self.const_str(e, depth + 1, scope, True) for e in seq.elts]
                    if all(i is not None for i in items):
                        return sep.join(items)  # type: ignore[arg-type]
                if isinstance(seq, ast.ListComp | ast.GeneratorExp):
                    return self.const_str(seq.elt, depth + 1, scope, True)
                return None
        fn = self.resolve(func) or ""
        if fn in _TEMPLATE_FUNCS and node.args:
            return self.const_str(node.args[0], depth + 1, scope, True)
        if isinstance(func, ast.Name) and func.id in self.module_funcs:
            target = self.module_funcs[func.id]
            if id(target) in self._calling:
                return None
            self._calling.add(id(target))
            try:
                return self.returned_str(target, depth + 1)
            finally:
                self._calling.discard(id(target))
        return None

    def returned_str(self, fn: _Fn, depth: int = 0) -> str | None:
        """The text a module function returns, if every return is a string template."""
        scope = self.func_locals(fn)
        rets = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
        texts = [self.const_str(r, depth + 1, scope, True) for r in rets]
        if not texts or any(t is None for t in texts):
            return None
        return "\n".join(texts)  # type: ignore[arg-type]

    def func_locals(self, fn: ast.AST) -> dict[str, ast.expr]:
        """Names assigned in a function (``+=`` accumulates), for templated strings."""
        got = self._locals_cache.get(id(fn))
        if got is not None:
            return got
        scope: dict[str, ast.expr] = {}

        def bind(name: str, value: ast.expr) -> None:
            if name in scope:  # `src = src.replace(...)`: refer to the previous value
                value = _Substitute(name, scope[name]).visit(copy.deepcopy(value))
            scope[name] = value

        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        bind(t.id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and node.value is not None:
                bind(node.target.id, node.value)
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) \
                    and isinstance(node.target, ast.Name) and node.target.id in scope:
                scope[node.target.id] = ast.BinOp(scope[node.target.id], ast.Add(), node.value)
        self._locals_cache[id(fn)] = scope
        return scope

    # ---- inputs (taint) --------------------------------------------------------------------
    def input_names(self, fn: ast.AST) -> set[str]:
        """Names in a hot function that carry the values of its inputs (its parameters and
        what is computed from them, tensor metadata such as ``x.shape`` excluded)."""
        got = self._taint_cache.get(id(fn))
        if got is not None:
            return got
        self._taint_cache[id(fn)] = set()  # while in progress (recursive helpers)
        tainted = self._tainted_params(fn)
        assigns: list[tuple[list[ast.expr], ast.AST]] = []
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                assigns.append((node.targets, node.value))
            elif isinstance(node, ast.AugAssign | ast.AnnAssign) and node.value is not None:
                assigns.append(([node.target], node.value))
            elif isinstance(node, ast.NamedExpr):
                assigns.append(([node.target], node.value))
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                assigns.append(([node.target], node.iter))
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                assigns.append(([node.optional_vars], node.context_expr))
        for _ in range(len(assigns) + 1):
            changed = False
            for targets, value in assigns:
                if not self.refs(value, tainted):
                    continue
                for t in targets:
                    for name in _bound_names(t):
                        if name not in tainted:
                            tainted.add(name)
                            changed = True
            if not changed:
                break
        self._taint_cache[id(fn)] = tainted
        return tainted

    def _tainted_params(self, fn: ast.AST) -> set[str]:
        """Parameters of ``fn`` that receive input values: all of forward's; for a helper
        called from the hot path, those its call sites pass input-derived values to."""
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return set()
        a = fn.args
        positional = [arg.arg for arg in [*a.posonlyargs, *a.args]]
        every = {arg.arg for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                 if arg is not None} - {"self", "cls"}
        name = getattr(fn, "name", None)
        if name in ("forward", "__call__", "_call_impl") or name is None:
            return every
        is_method = bool(positional) and positional[0] in ("self", "cls")
        params = positional[1:] if is_method else positional
        tainted: set[str] = set()
        callers = [f for f in ast.walk(self.tree)
                   if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and id(f) in self.hot
                   and f is not fn]
        for caller in callers:
            caller_inputs = self.input_names(caller)
            for call in ast.walk(caller):
                if not isinstance(call, ast.Call):
                    continue
                f = call.func
                if not ((isinstance(f, ast.Name) and f.id == name and not is_method) or (
                        self_attr(f) == name and is_method)):
                    continue
                for i, arg in enumerate(call.args):
                    if isinstance(arg, ast.Starred):
                        if self.refs(arg, caller_inputs):
                            return every
                        continue
                    if i < len(params) and self.refs(arg, caller_inputs):
                        tainted.add(params[i])
                    elif i >= len(params) and a.vararg is not None \
                            and self.refs(arg, caller_inputs):
                        tainted.add(a.vararg.arg)
                for kw in call.keywords:
                    if self.refs(kw.value, caller_inputs):
                        if kw.arg is None:
                            return every
                        tainted.add(kw.arg)
        return tainted & every if every else tainted

    def refs(self, node: ast.AST | None, names: set[str]) -> bool:
        """Does the expression read the values of any of ``names`` (metadata excluded)?"""
        if node is None or not names:
            return False
        stack: list[ast.AST] = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, ast.Name):
                if n.id in names:
                    return True
                continue
            if isinstance(n, ast.Attribute) and n.attr in META_ATTRS:
                continue
            if isinstance(n, ast.Call):
                if isinstance(n.func, ast.Attribute) and (
                        n.func.attr in META_ATTRS or n.func.attr in SHAPE_ONLY_METHODS):
                    continue
                if (self.resolve(n.func) or "") in SHAPE_ONLY_CALLS:
                    continue
            if isinstance(n, ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            stack.extend(ast.iter_child_nodes(n))
        return False

    # ---- pass 1: collect -------------------------------------------------------------------
    def collect(self) -> None:  # noqa: C901 - one walk per kind of binding, kept together
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = normalize(a.name)
                    else:
                        top = a.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom):
                mod = "." * node.level + (node.module or "")
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = normalize(f"{mod}.{a.name}")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.local_names.add(node.name)
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                        self.local_names.add(a.arg)
                    for a in (node.args.vararg, node.args.kwarg):
                        if a is not None:
                            self.local_names.add(a.arg)
            elif isinstance(node, ast.Lambda):
                for a in node.args.args:
                    self.local_names.add(a.arg)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    self.docstrings.add(id(body[0].value))
        # simple name bindings, iterated to a fixpoint so chains of aliases resolve
        assigns: list[tuple[str, ast.expr]] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        assigns.append((t.id, node.value))
                    elif isinstance(t, ast.Tuple | ast.List):
                        for e in t.elts:
                            if isinstance(e, ast.Name):
                                self.local_names.add(e.id)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
                if isinstance(node, ast.AnnAssign) and node.value is not None:
                    assigns.append((node.target.id, node.value))
                else:
                    self.local_names.add(node.target.id)
            elif isinstance(node, ast.NamedExpr):
                assigns.append((node.target.id, node.value))
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                for e in ast.walk(node.target):
                    if isinstance(e, ast.Name):
                        self.local_names.add(e.id)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                for e in ast.walk(node.optional_vars):
                    if isinstance(e, ast.Name):
                        self.local_names.add(e.id)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.local_names.add(node.name)
        for name, _ in assigns:
            if name not in self.aliases:
                self.local_names.add(name)
        for _ in range(5):
            changed = False
            for name, value in assigns:
                if isinstance(value, ast.Name | ast.Attribute | ast.Call | ast.Subscript):
                    target = self.resolve(value)
                    if target and target != name and target != "self" and (
                            isinstance(value, ast.Call) or not target.startswith("self.")):
                        root = target.split(".")[0]
                        if (isinstance(value, ast.Call) or root in self.aliases.values()
                                or root in BUILTINS_REF
                                or any(v.startswith(root + ".") for v in self.aliases.values())
                                or self._match_rule(target)):
                            if self.aliases.get(name) != target:
                                self.aliases[name] = target
                                self.local_names.discard(name)
                                changed = True
            if not changed:
                break
        # functions and classes (before the string constants: templates call functions)
        for stmt in self.tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                self.module_funcs[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = {
                    s.name: s for s in stmt.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                }
        # module-level string constants and containers
        for stmt in self.tree.body:
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(stmt, ast.Assign):
                targets, value = stmt.targets, stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                targets, value = [stmt.target], stmt.value
            elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
                if isinstance(stmt.target, ast.Name) and stmt.target.id in self.str_consts:
                    prev = self.str_consts[stmt.target.id]
                    self.str_consts[stmt.target.id] = ast.BinOp(prev, ast.Add(), stmt.value)
                continue
            for t in targets:
                if not isinstance(t, ast.Name) or value is None:
                    continue
                if self.const_str(value, template=True) is not None:
                    self.str_consts[t.id] = value
                if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp):
                    self.module_containers.add(t.id)
                elif isinstance(value, ast.Call):
                    fn = self.resolve(value.func) or ""
                    if fn.split(".")[-1] in _CONTAINER_FACTORIES:
                        self.module_containers.add(t.id)
        # the hot path: forward and what it calls
        work: list[tuple[_Fn, str | None]] = []
        for cname, methods in self.classes.items():
            for root in ("forward", "__call__", "_call_impl"):
                if root in methods:
                    work.append((methods[root], cname))
        while work:
            fn, cname = work.pop()
            if id(fn) in self.hot:
                continue
            self.hot.add(id(fn))
            for sub in ast.walk(fn):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                        and sub.value.id == "self" and cname is not None:
                    m = self.classes.get(cname, {}).get(sub.attr)
                    if m is not None:
                        work.append((m, cname))
                elif isinstance(sub, ast.Name) and sub.id in self.module_funcs:
                    work.append((self.module_funcs[sub.id], None))
                elif isinstance(sub, ast.Name) and sub.id in self.classes:
                    for m in self.classes[sub.id].values():
                        work.append((m, sub.id))
        # names and self attributes holding compiled modules / parameters
        for _ in range(2):
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign) and self.is_compiled_value(node.value) and \
                        not isinstance(node.value, ast.Constant):
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            self.compiled_names.add(t.id)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    attr = self_attr(t)
                    if attr and self.is_compiled_value(node.value) and \
                            not isinstance(node.value, ast.Constant):
                        self.compiled_attrs.add(attr)
                    if attr and isinstance(node.value, ast.Call):
                        fn = self.resolve(node.value.func) or ""
                        if fn.startswith("torch.") or fn.endswith("Parameter"):
                            self.param_attrs.add(attr)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "register_buffer" and node.args:
                n = self.const_str(node.args[0])
                if n:
                    self.param_attrs.add(n)

    def is_compiled_value(self, value: ast.AST) -> bool:
        if isinstance(value, ast.Constant):
            return True
        if isinstance(value, ast.Call):
            fn = self.resolve(value.func) or ""
            if any(fn == p or fn.startswith(p + ".") for p in COMPILE_CALLS):
                return True
            if fn in ("load_inline", "load") or fn.endswith("load_inline"):
                return True
            if fn in self.module_funcs:  # a local builder function; judged on its own body
                return self.func_returns_compiled(self.module_funcs[fn])
        if isinstance(value, ast.Attribute):
            base = value.value
            if self_attr(base) in self.compiled_attrs:
                return True
            return isinstance(base, ast.Name) and (
                base.id in self.aliases or base.id in self.compiled_names)
        if isinstance(value, ast.Name):
            return (value.id in self.module_funcs or value.id in self.aliases
                    or value.id in self.compiled_names)
        return False

    def func_returns_compiled(self, fn: _Fn) -> bool:
        rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
        if not rets:
            return False
        for r in rets:
            v = r.value
            if isinstance(v, ast.Call) and id(fn) not in self._calling:
                self._calling.add(id(fn))
                try:
                    ok = self.is_compiled_value(v)
                finally:
                    self._calling.discard(id(fn))
                if ok:
                    continue
            if isinstance(v, ast.Name | ast.Attribute | ast.Constant):
                continue
            return False
        return True


def _bound_names(target: ast.AST) -> Iterator[str]:
    """Names a binding target binds (not the bases of attribute or subscript targets)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for e in target.elts:
            yield from _bound_names(e)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


class _Substitute(ast.NodeTransformer):
    def __init__(self, name: str, value: ast.expr) -> None:
        self.name, self.value = name, value

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return self.value if node.id == self.name and isinstance(node.ctx, ast.Load) else node
