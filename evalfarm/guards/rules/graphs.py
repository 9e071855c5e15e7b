"""CUDA graphs: replayed work hides launch cost. Runtime: fresh inputs every call and exact
output checks (a graph replayed over stale buffers returns wrong results). Role: policy."""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import cpp_rule, name_rules

RULE_IDS = ("cuda_graph",)

NAMES = name_rules(
    "cuda_graph",
    [
        "torch.cuda.CUDAGraph", "torch.cuda.graph", "torch.cuda.graphs",
        "torch.cuda.make_graphed_callables", "torch.cuda.graph_pool_handle",
        "cupy.cuda.Graph", "torch._inductor.cudagraph_trees",
    ],
    "uses CUDA graphs (replays recorded work)",
)

CPP = (
    cpp_rule("cuda_graph", r"\bcudaGraph\w*|\bcuGraph\w*|\bcudaStreamBeginCapture\w*|"
             r"\bcudaStreamEndCapture\b|\bcuStreamBeginCapture\w*|\bCUDAGraph\b",
             "uses CUDA graphs"),
)


def on_call(eng: Any, node: ast.Call, fn: str | None, method: str | None) -> None:
    if not (fn == "torch.compile" or (fn or "").endswith("torch.compile")):
        return
    for kw in node.keywords:
        if kw.arg == "mode":
            mode = eng.index.const_str(kw.value)
            if mode in ("reduce-overhead", "max-autotune"):
                eng.add("cuda_graph", node,
                        f"torch.compile(mode={mode!r}) records and replays CUDA graphs")
        if kw.arg == "options" and isinstance(kw.value, ast.Dict):
            for k, v in zip(kw.value.keys, kw.value.values, strict=False):
                ks = eng.index.const_str(k) if k is not None else None
                if ks and "cudagraph" in ks and not (
                        isinstance(v, ast.Constant) and v.value is False):
                    eng.add("cuda_graph", node, f"torch.compile(options={{{ks!r}: ...}}) "
                            "turns on CUDA graphs")


def on_patch(eng: Any, node: ast.AST, target: str, verb: str) -> bool:
    if "cudagraph" in target and target.startswith(("torch._inductor.config",
                                                    "torch._dynamo.config")):
        eng.add("cuda_graph", node, f"{verb} {target}: turns on CUDA graphs")
    return False  # also a global flag
