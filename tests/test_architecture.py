"""The arrows of docs/architecture.md, kept true: every module's imports (function-level ones
included) are read from its source, and an import across a forbidden arrow fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SANDBOX = ("evalfarm.sandbox",)
# What the learner may use of the farm: the client side (docs/architecture.md, "The arrows").
LEARNER_MAY_USE = ("evalfarm.client", "evalfarm.result", "evalfarm.verdict", "evalfarm.infra_cause",
                   "evalfarm.config", "evalfarm.tasks", "evalfarm.server.local", "evalfarm.devices",
                   "evalfarm.sandbox.isolation", "evalfarm.v1")


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every absolute module name ``path`` imports: ``from a import b`` is a.b where that is a
    module of ours, else a (b is a name in a)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                names.add(sub if sub in modules else node.module)
    return names


def _graph() -> dict[str, set[str]]:
    files = [p for top in ("evalfarm", "learner") for p in (REPO / top).rglob("*.py")]
    modules = {_module(p) for p in files}
    return {_module(p): _imports(p, modules) for p in files if "v1" not in p.parts}


GRAPH = _graph()


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def crossings(sources: tuple[str, ...], forbidden: tuple[str, ...], allowed: tuple[str, ...] = (),
              exempt: tuple[str, ...] = ()) -> list[str]:
    """``module -> import`` for every import from a module under ``sources`` (and not under
    ``exempt``) into ``forbidden`` that is not under ``allowed``."""
    return sorted(f"{m} -> {name}" for m, names in GRAPH.items() if _under(m, sources) and not _under(m, exempt)
                  for name in names if _under(name, forbidden) and not _under(name, allowed))


RULES = {
    "the farm knows nothing of the learner": (("evalfarm",), ("learner",), ()),
    "the judge never imports the network edge": (("evalfarm.judge",), ("evalfarm.server", "evalfarm.client"), ()),
    "a client process never loads the daemon's side": (
        ("evalfarm.client",), ("evalfarm.server", "evalfarm.scoring", "evalfarm.judge", "evalfarm.guards",
                               "evalfarm.build"), ()),
    "the sandbox knows nothing of the judge": (SANDBOX, ("evalfarm.judge", "evalfarm.scoring"), ()),
    "the guards use only the judge's wire frames": (
        ("evalfarm.guards",), ("evalfarm.judge", "evalfarm.server", "evalfarm.client", "evalfarm.scoring"),
        ("evalfarm.judge.framing",)),
    # the learner's packages (docs/architecture.md, "The learner's packages")
    "the model stack knows nothing of the trainer": (("learner.lm",), ("learner",), ("learner.lm",)),
    "the runtime knows nothing of RL, the stages, reports or benchmarks": (
        ("learner.runtime",), ("learner",), ("learner.runtime", "learner.lm", "learner.config_check")),
    "learner.rl knows nothing of the stages, reports or benchmarks": (
        ("learner.rl",), ("learner",), ("learner.rl", "learner.runtime", "learner.lm")),
    "reports are plain data in, files out": (("learner.report",), ("learner",), ("learner.report",)),
    "the stages never import the trainer, the experiment, the CLI or the benchmarks": (
        ("learner.stages",), ("learner",),
        ("learner.stages", "learner.rl", "learner.runtime", "learner.lm", "learner.report", "learner.config_check")),
    "only the CLI loads the benchmarks": (("learner",), ("learner.bench",), (), ("learner.bench", "learner.cli")),
    "the learner reaches the farm only through learner.rl": (("learner",), ("evalfarm",), (), ("learner.rl",)),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_no_import_crosses_a_forbidden_arrow(rule: str) -> None:
    assert crossings(*RULES[rule]) == [], rule


def test_the_learner_uses_the_farm_as_a_client() -> None:
    # The bare `evalfarm` package (its version) is allowed; anything else must be listed.
    bad = [c for c in crossings(("learner",), ("evalfarm",), LEARNER_MAY_USE) if not c.endswith(" -> evalfarm")]
    assert bad == []


def test_the_checker_sees_imports_inside_functions_and_would_catch_a_crossing() -> None:
    # A check that cannot fail is no check: the graph holds function-level imports, and a judge
    # module importing the server would be reported.
    assert "evalfarm.server.local" in GRAPH["learner.rl.farm"]  # imported inside a function there
    GRAPH["evalfarm.judge.fake_for_this_test"] = {"evalfarm.server.service"}
    try:
        assert crossings(("evalfarm.judge",), ("evalfarm.server",)) == [
            "evalfarm.judge.fake_for_this_test -> evalfarm.server.service"]
    finally:
        del GRAPH["evalfarm.judge.fake_for_this_test"]


def test_a_learner_rule_would_catch_a_crossing() -> None:
    # The runtime importing a stage, or a stage importing the farm's client, would be reported.
    GRAPH["learner.runtime.fake_for_this_test"] = {"learner.stages.rl", "learner.lm.model"}
    GRAPH["learner.stages.fake_for_this_test"] = {"evalfarm.client", "learner.rl.farm"}
    try:
        assert crossings(*RULES["the runtime knows nothing of RL, the stages, reports or benchmarks"]) == [
            "learner.runtime.fake_for_this_test -> learner.stages.rl"]
        assert crossings(*RULES["the learner reaches the farm only through learner.rl"]) == [
            "learner.stages.fake_for_this_test -> evalfarm.client"]
    finally:
        del GRAPH["learner.runtime.fake_for_this_test"], GRAPH["learner.stages.fake_for_this_test"]
