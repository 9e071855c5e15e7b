"""Pass 2: one walk over the candidate's AST that hands each construct to the rule modules.

The walk resolves what a construct refers to (through :class:`NameIndex`) and classifies
writes (to ``self``, to a module or class attribute, into a container); the rule modules in
:mod:`evalfarm.guards.rules` decide what is evidence. Names are matched against the ``NAMES``
tables of all rule modules at once.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from evalfarm.guards.analysis.index import BUILTINS_REF, NameIndex
from evalfarm.guards.findings import Finding
from evalfarm.guards.policy import GuardPolicy
from evalfarm.guards.rule_roles import ROLES
from evalfarm.guards.rules import MODULES, PATCH_ORDER
from evalfarm.guards.rules.base import NameRule, normalize, prefixes

_Fn = ast.FunctionDef | ast.AsyncFunctionDef

NAME_RULES: dict[str, NameRule] = {}
for _m in MODULES:
    for _k, _rule in getattr(_m, "NAMES", {}).items():
        if _k in NAME_RULES:
            raise RuntimeError(f"name rule {_k!r} declared twice")
        NAME_RULES[_k] = _rule
for _m in MODULES:
    for _g in getattr(_m, "RULE_IDS", ()):
        if _g not in ROLES:
            raise RuntimeError(f"rule id {_g!r} of {_m.__name__} has no role in roles.ROLES")

HOOKS: dict[str, list[Callable[..., Any]]] = {}
for _hook in ("on_function", "on_class", "on_attribute", "on_call", "on_self_store",
              "on_subscript_store", "on_return", "on_raise", "on_global", "on_binop",
              "on_name", "on_import_from"):
    HOOKS[_hook] = [getattr(m, _hook) for m in MODULES if hasattr(m, _hook)]
PATCH_HOOKS = [m.on_patch for m in PATCH_ORDER]


def match_name(name: str) -> tuple[str, NameRule] | None:
    for prefix in prefixes(name):
        rule = NAME_RULES.get(prefix)
        if rule is not None:
            return prefix, rule
    if name.startswith("torch._C._set_") or name.startswith("torch._C._jit_set_"):
        return name, NameRule("global_state", "private torch setter changes process-wide state")
    return None


class Engine(ast.NodeVisitor):
    def __init__(self, tree: ast.Module, policy: GuardPolicy, precisions: frozenset[str]) -> None:
        self.tree = tree
        self.policy = policy
        self.precisions = precisions
        self.index = NameIndex(tree, match_name)
        self.findings: list[Finding] = []
        self._seen: set[tuple[str, int | None, str]] = set()
        self.func_stack: list[_Fn | ast.Lambda] = []
        self.class_stack: list[str] = []
        self.with_items: set[int] = set()
        self.cpp_arg_nodes: set[int] = set()

    # ---- reporting -------------------------------------------------------------------------
    def add(self, guard: str, node: ast.AST | None, what: str) -> None:
        line = getattr(node, "lineno", None) if node is not None else None
        key = (guard, line, what)
        if key in self._seen:
            return
        self._seen.add(key)
        prefix = f"line {line}: " if line is not None else ""
        self.findings.append(Finding(guard, prefix + what, line))

    def add_finding(self, f: Finding) -> None:
        # C++ findings for the same token from the load_inline() call and from the string
        # itself are the same finding; keep the one with the precise line.
        token = f.reason.split("`")[1] if "`" in f.reason else f.reason
        for i, g in enumerate(self.findings):
            if g.guard == f.guard and "`" in g.reason and g.reason.split("`")[1] == token \
                    and "source contains" in g.reason:
                self.findings[i] = f
                return
        key = (f.guard, f.line, f.reason)
        if key not in self._seen:
            self._seen.add(key)
            self.findings.append(f)

    def report_rule(self, node: ast.AST, name: str, rule: NameRule, verb: str = "") -> None:
        if rule.precision is not None and rule.precision in self.precisions:
            return
        if rule.hot_only and not (self.in_hot() or not self.func_stack):
            return
        self.add(rule.guard, node, f"{verb}{name}: {rule.reason}")

    def check_name(self, node: ast.AST, name: str, verb: str = "") -> bool:
        for hook in HOOKS["on_name"]:
            hook(self, node, name, verb)
        m = match_name(name)
        if m is None:
            return False
        self.report_rule(node, name, m[1], verb)
        return True

    # ---- context ---------------------------------------------------------------------------
    def in_hot(self) -> bool:
        return any(id(f) in self.index.hot for f in self.func_stack)

    def current_method(self) -> _Fn | None:
        for f in reversed(self.func_stack):
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                return f
        return None

    def inputs(self) -> set[str]:
        """Names carrying input values in the current hot function (empty elsewhere)."""
        method = self.current_method()
        if method is None or id(method) not in self.index.hot:
            return set()
        return self.index.input_names(method)

    def scope(self) -> dict[str, ast.expr] | None:
        method = self.current_method()
        return None if method is None else self.index.func_locals(method)

    # ---- walk ------------------------------------------------------------------------------
    def run(self) -> list[Finding]:
        self.visit(self.tree)
        from evalfarm.guards.analysis.cpp import scan_strings

        scan_strings(self)
        return self.findings

    def visit_FunctionDef(self, node: _Fn) -> None:
        for hook in HOOKS["on_function"]:
            hook(self, node)
        self.func_stack.append(node)
        self.generic_visit(node)
        self.func_stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.func_stack.append(node)
        self.generic_visit(node)
        self.func_stack.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for hook in HOOKS["on_class"]:
            hook(self, node)
        self.class_stack.append(node.name)
        self.generic_visit(node)
        self.class_stack.pop()

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.check_name(node, normalize(a.name), verb="imports ")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for hook in HOOKS["on_import_from"]:
            hook(self, node)
        mod = node.module or ""
        if node.level == 0:
            self.check_name(node, normalize(mod), verb="imports ")
            for a in node.names:
                if a.name != "*":
                    self.check_name(node, normalize(f"{mod}.{a.name}"), verb="imports ")

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            name = self.index.resolve(node)
            if name and (node.id in self.index.aliases or node.id in BUILTINS_REF):
                self.check_name(node, name)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        for hook in HOOKS["on_attribute"]:
            hook(self, node)
        if isinstance(node.ctx, ast.Load):
            name = self.index.resolve(node)
            if name and name.split(".")[0] != "self" and self.check_name(node, name):
                return  # matched the full chain; don't report its prefixes again
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        name = self.index.resolve(node)
        if name:
            base = self.index.resolve(node.value)
            if base == "sys.modules" or (base or "").endswith("__dict__"):
                self.check_name(node, name, verb="reaches ")
        self.generic_visit(node)

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.with_items.add(id(item.context_expr))
        self.generic_visit(node)

    visit_AsyncWith = visit_With  # noqa: N815

    def visit_Global(self, node: ast.Global) -> None:
        for hook in HOOKS["on_global"]:
            hook(self, node)

    def visit_Raise(self, node: ast.Raise) -> None:
        for hook in HOOKS["on_raise"]:
            hook(self, node)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        for hook in HOOKS["on_return"]:
            hook(self, node)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        for hook in HOOKS["on_binop"]:
            hook(self, node)
        self.generic_visit(node)

    # ---- writes ----------------------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self.check_store(t, node.value, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.check_store(node.target, node.value, node, augmented=True)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.check_store(node.target, node.value, node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self.check_store(t, None, node)
        self.generic_visit(node)

    def check_store(self, target: ast.AST, value: ast.AST | None, stmt: ast.AST,
                    augmented: bool = False) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for e in target.elts:
                self.check_store(e, value, stmt)
            return
        if isinstance(target, ast.Starred):
            self.check_store(target.value, value, stmt)
            return
        if isinstance(target, ast.Attribute):
            base = self.index.resolve(target.value)
            if base == "self" or (isinstance(target.value, ast.Name) and target.value.id == "self"):
                for hook in HOOKS["on_self_store"]:
                    hook(self, target.attr, value, stmt, augmented)
                return
            if base and self.index.is_module_like(base):
                self.patch(stmt, f"{base}.{target.attr}", "assigns")
            return
        if isinstance(target, ast.Subscript):
            base = self.index.resolve(target.value)
            if base and base.endswith(".__dict__"):
                key = self.index.const_str(target.slice)
                self.patch(stmt, f"{base[: -len('.__dict__')]}.{key or '?'}", "writes __dict__ of")
                return
            for hook in HOOKS["on_subscript_store"]:
                hook(self, target, base, value, stmt)

    def patch(self, node: ast.AST, target: str, verb: str) -> None:
        """A write to a module or class attribute: the first rule module that claims it."""
        target = normalize(target)
        for hook in PATCH_HOOKS:
            if hook(self, node, target, verb):
                return

    # ---- calls -----------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        fn = self.index.resolve(node.func)
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        self.resolve_call_names(node, fn, method)
        for hook in HOOKS["on_call"]:
            hook(self, node, fn, method)
        self.generic_visit(node)

    def resolve_call_names(self, node: ast.Call, fn: str | None, method: str | None) -> None:
        """Writes and imports spelled as calls: setattr/delattr, __import__, getattr(m, "x")."""
        args = node.args
        if fn in ("setattr", "delattr", "object.__setattr__", "type.__setattr__",
                  "object.__delattr__") and args:
            self.check_setattr(node, fn, args)
        elif method in ("__setattr__", "__delattr__") and args:
            base = self.index.resolve(node.func.value)  # type: ignore[union-attr]
            if base and base != "self" and self.index.is_module_like(base):
                name = self.index.const_str(args[0])
                self.patch(node, f"{base}.{name or '?'}", "setattr on")
        if fn in ("__import__", "importlib.import_module", "importlib.__import__") and args:
            mod = self.index.const_str(args[0])
            if mod is not None:
                self.check_name(node, normalize(mod), verb=f"{fn}() imports ")
        if fn == "getattr" and len(args) >= 2 and self.index.const_str(args[1]) is not None:
            target = self.index.resolve(node)
            if target and not target.startswith("self."):
                self.check_name(node, target)

    def check_setattr(self, node: ast.Call, fn: str, args: list[ast.expr]) -> None:
        obj = args[0]
        base = self.index.resolve(obj)
        if base == "self" or (isinstance(obj, ast.Name) and obj.id == "self"):
            if fn.startswith("setattr") and len(args) >= 3:
                name = self.index.const_str(args[1]) or "<computed>"
                for hook in HOOKS["on_self_store"]:
                    hook(self, name, args[2], node, False)
            return
        name = self.index.const_str(args[1]) if len(args) > 1 else None
        if base and self.index.is_module_like(base):
            self.patch(node, f"{base}.{name or '?'}", f"{fn}() on")
        elif (isinstance(obj, ast.Call) and self.index.resolve(obj.func) == "type") or (
                isinstance(obj, ast.Attribute) and obj.attr == "__class__"):
            # setattr(type(x), ...) / setattr(x.__class__, ...): a class such as torch.Tensor
            self.patch(node, f"torch.Tensor.{name or '?'}", f"{fn}() on the class of a value,")
