"""Optional behaviours that only some policies forbid: PyTorch compute ops in forward
(``torch_op``, the ``strict`` policy) and Triton (``triton``). Reported only when the policy
forbids them (allowed, they are no evidence of anything). Role: policy."""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import self_attr, short

RULE_IDS = ("torch_op", "triton")

ALLOC_CALLS = {
    "torch.empty", "torch.empty_like", "torch.zeros", "torch.zeros_like", "torch.ones",
    "torch.ones_like", "torch.full", "torch.full_like", "torch.empty_strided", "torch.arange",
    "torch.tensor", "torch.as_tensor",
}
_STRICT_TORCH_ALLOWED = ALLOC_CALLS | {
    "torch.Size", "torch.device", "torch.cuda.current_stream", "torch.cuda.current_device",
    "torch.cuda.is_available", "torch.cuda.get_device_properties", "torch.is_tensor",
    "torch.no_grad", "torch.inference_mode", "torch.broadcast_shapes", "torch.result_type",
    "torch.promote_types", "torch.finfo", "torch.iinfo", "torch.get_default_dtype",
    "torch.is_grad_enabled", "torch.cuda.get_device_capability", "torch.cuda.device",
    "torch.cuda.default_stream", "torch._assert", "torch.is_floating_point",
    "torch.numel", "torch.jit.is_scripting", "torch.compiler.is_compiling", "torch.Tensor",
    "torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load",
    "torch.cuda.Event", "torch.get_device",
}
_TENSOR_COMPUTE_METHODS = {
    "matmul", "mm", "bmm", "addmm", "addmv", "addbmm", "baddbmm", "mv", "dot", "einsum", "relu",
    "relu_", "sigmoid", "sigmoid_", "tanh", "tanh_", "softmax", "log_softmax", "sum", "mean",
    "max", "min", "amax", "amin", "exp", "exp_", "log", "log_", "pow", "pow_", "sqrt", "rsqrt",
    "mul", "mul_", "add", "add_", "sub", "sub_", "div", "div_", "clamp", "clamp_", "clip",
    "abs", "neg", "norm", "var", "std", "cumsum", "cumprod", "prod", "argmax", "argmin", "sort",
    "topk", "gelu", "silu", "masked_fill", "masked_fill_", "where", "addcmul", "addcdiv", "lerp",
    "sin", "cos", "erf", "floor", "ceil", "round", "sign", "tril", "triu", "gather", "scatter",
    "scatter_add", "index_select", "index_add", "logsumexp", "square", "reciprocal", "expm1",
    "log1p", "hardtanh", "leaky_relu", "elu", "selu", "mish", "softplus", "conv2d", "linear",
    "maximum", "minimum", "fmod", "remainder", "flip", "roll", "cross", "diag", "outer",
    "kron", "cdist", "median", "mode", "quantile", "logical_and", "logical_or", "all", "any",
    "clone", "copy_", "cat", "repeat", "repeat_interleave", "tile", "__matmul__",
}


def on_name(eng: Any, node: ast.AST, name: str, verb: str) -> None:
    if not eng.policy.allow_triton and (name == "triton" or name.startswith("triton.")):
        eng.add("triton", node, f"{verb}{name}: Triton is not allowed by this policy")


def on_call(eng: Any, node: ast.Call, fn: str | None, method: str | None) -> None:
    if eng.policy.allow_torch_ops or not eng.in_hot():
        return
    idx = eng.index
    if fn and fn.startswith("torch."):
        if fn in _STRICT_TORCH_ALLOWED or fn.startswith(("torch.cuda.", "torch.utils.",
                                                         "torch.library", "torch._assert")):
            return
        eng.add("torch_op", node, f"{fn}() is a PyTorch compute op; the strict policy "
                "requires forward to use custom kernels")
        return
    if method in _TENSOR_COMPUTE_METHODS and isinstance(node.func, ast.Attribute):
        recv = node.func.value
        rname = idx.resolve(recv)
        attr = self_attr(recv)
        if attr in idx.compiled_attrs or (isinstance(recv, ast.Name)
                                          and recv.id in idx.compiled_names):
            return
        roots = {v.split(".")[0] for v in idx.aliases.values()}
        if rname and rname != "self" and (rname in idx.aliases.values()
                                          or rname.split(".")[0] in roots):
            return  # calls into a compiled module object, e.g. mod.matmul(...)
        eng.add("torch_op", node, f".{method}() is a PyTorch compute op; the strict policy "
                "requires forward to use custom kernels")


def _tensorish(eng: Any, node: ast.AST) -> bool:
    method = eng.current_method()
    if method is None:
        return False
    params = {a.arg for a in method.args.args[1:]}
    if isinstance(node, ast.Name):
        return node.id in params
    attr = self_attr(node)
    return attr is not None and attr in eng.index.param_attrs \
        and attr not in eng.index.compiled_attrs


def on_binop(eng: Any, node: ast.BinOp) -> None:
    if eng.policy.allow_torch_ops or not eng.in_hot():
        return
    if isinstance(node.op, ast.MatMult):
        eng.add("torch_op", node, "`@` is a PyTorch matmul; the strict policy requires "
                "forward to use custom kernels")
    elif _tensorish(eng, node.left) or _tensorish(eng, node.right):
        eng.add("torch_op", node, f"tensor arithmetic `{short(node)}` in forward; the "
                "strict policy requires custom kernels")
