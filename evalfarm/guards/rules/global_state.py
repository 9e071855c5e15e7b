"""Process-wide state (backend flags, thread counts, default dtype, environment). Runtime: the
reference runs in a separate process the candidate never touches, so these settings change
only the candidate's own numbers. Performance-only switches (cuDNN autotuning, preferred BLAS
or linear-algebra library, SDPA backends) are not reported. Role: testifies."""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import matches, name_rules

RULE_IDS = ("global_state",)

NAMES = name_rules(
    "global_state",
    [
        "torch.set_float32_matmul_precision", "torch.set_num_threads",
        "torch.set_num_interop_threads", "torch.set_flush_denormal",
        "torch.use_deterministic_algorithms", "torch.set_deterministic_debug_mode",
        "torch.set_default_dtype", "torch.set_default_device", "torch.set_default_tensor_type",
        "torch.set_warn_always", "torch.cuda.set_per_process_memory_fraction",
        "torch.cuda.memory.set_per_process_memory_fraction", "torch.cuda.set_sync_debug_mode",
        "torch.cuda.tunable", "torch.backends.cudnn.set_flags",
        "torch.set_anomaly_enabled", "torch.autograd.set_detect_anomaly",
        "torch.cuda.set_device", "os.putenv", "os.unsetenv", "torch.set_printoptions",
        "torch._C._jit_set_profiling_executor", "torch.cuda.set_allocator_settings",
        "torch.cuda.memory._set_allocator_settings", "torch.cuda.memory.change_current_allocator",
        "numpy.seterr",
    ],
    "changes process-wide state",
)

_PREFIXES = (
    "torch.backends", "torch._inductor.config", "torch._dynamo.config", "torch._functorch.config",
    "torch.jit._state", "torch._C._jit", "os.environ",
)
# Switches that only choose among equally exact implementations.
PERFORMANCE_ONLY = (
    "torch.backends.cudnn.benchmark", "torch.backends.cudnn.benchmark_limit",
    "torch.backends.cudnn.enabled", "torch.backends.cuda.preferred_linalg_library",
    "torch.backends.cuda.preferred_blas_library", "torch.backends.cuda.enable_flash_sdp",
    "torch.backends.cuda.enable_mem_efficient_sdp", "torch.backends.cuda.enable_math_sdp",
    "torch.backends.cuda.enable_cudnn_sdp", "torch.backends.mkldnn.enabled",
    "torch.backends.cuda.cufft_plan_cache", "torch._dynamo.config.cache_size_limit",
    "torch._dynamo.config.suppress_errors", "torch._inductor.config.max_autotune",
)


def on_patch(eng: Any, node: ast.AST, target: str, verb: str) -> bool:
    if not target.startswith(_PREFIXES):
        return False
    if not matches(target, PERFORMANCE_ONLY):
        eng.add("global_state", node, f"{verb} {target}: process-wide flag")
    return True


def on_subscript_store(eng: Any, target: ast.Subscript, base: str | None, value: Any,
                       stmt: ast.AST) -> None:
    if base == "os.environ":
        eng.add("global_state", stmt, "writes os.environ (seen by the whole process)")


def on_call(eng: Any, node: ast.Call, fn: str | None, method: str | None) -> None:
    if method in ("update", "setdefault", "pop", "popitem", "clear", "__setitem__",
                  "__delitem__") and eng.index.resolve(node.func.value) == "os.environ":  # type: ignore[union-attr]
        eng.add("global_state", node, f"os.environ.{method}() changes the environment of "
                "the whole process")
    if fn == "torch.set_grad_enabled" and id(node) not in eng.with_items:
        eng.add("global_state", node, "torch.set_grad_enabled() outside a with-block "
                "changes autograd for the whole process")
