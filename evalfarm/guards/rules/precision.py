"""Reduced precision (fp16/bf16/fp8, autocast, TF32). Runtime: tolerance decides whether the
result is precise enough. Precision the reference itself uses is not reported. Role: policy."""

from __future__ import annotations

import ast
import re
from typing import Any

from evalfarm.guards.rules.base import cpp_rule, name_rules

RULE_IDS = ("reduced_precision",)

NAMES = name_rules(
    "reduced_precision",
    ["torch.float16", "torch.half", "torch.HalfTensor", "torch.cuda.HalfTensor",
     "numpy.float16", "numpy.half", "triton.language.float16", "torch.complex32", "torch.chalf"],
    "uses float16", precision="fp16",
)
NAMES |= name_rules(
    "reduced_precision",
    ["torch.bfloat16", "torch.BFloat16Tensor", "torch.cuda.BFloat16Tensor",
     "triton.language.bfloat16"],
    "uses bfloat16", precision="bf16",
)
NAMES |= name_rules(
    "reduced_precision",
    ["torch.float8_e4m3fn", "torch.float8_e5m2", "torch.float8_e4m3fnuz",
     "torch.float8_e5m2fnuz", "torch.float8_e8m0fnu", "torch.float4_e2m1fn_x2",
     "triton.language.float8e4nv", "triton.language.float8e5", "triton.language.float8e4b15",
     "torch._scaled_mm"],
    "uses 8-bit (or smaller) floats", precision="fp8",
)
NAMES |= name_rules(
    "reduced_precision",
    ["torch.autocast", "torch.amp", "torch.cuda.amp", "torch.cpu.amp",
     "torch.get_autocast_gpu_dtype", "torch.set_autocast_enabled"],
    "uses autocast (mixed precision)", precision="autocast",
)

# Quantifiers are bounded so that a hostile source cannot make the scan quadratic.
CPP = (
    cpp_rule("reduced_precision", r"\b__half2?\b|\bhalf2\b|__float2half\w*|__half2float\w*|"
             r"__hadd\w*|__hmul\w*|__hfma\w*|\bkHalf\b|\bkFloat16\b|\bat\s*::\s*Half\b|"
             r"\bc10\s*::\s*Half\b|\bwmma\s*::\s*fragment\s*<[^>]{0,200}\bhalf\b|"
             r"mma\.sync[\w.]{0,80}\.f16|\bwgmma[\w.]{0,80}\.f16",
             "uses float16 arithmetic", precision="fp16"),
    cpp_rule("reduced_precision", r"\b__nv_bfloat162?\b|__float2bfloat16\w*|\bkBFloat16\b|"
             r"\bat\s*::\s*BFloat16\b|\bc10\s*::\s*BFloat16\b|mma\.sync[\w.]{0,80}\.bf16|"
             r"\bwgmma[\w.]{0,80}\.bf16|\bwmma\s*::\s*fragment\s*<[^>]{0,200}__nv_bfloat16",
             "uses bfloat16 arithmetic", precision="bf16"),
    cpp_rule("reduced_precision", r"\b__nv_fp8\w*|\.e4m3\b|\.e5m2\b|\bkFloat8\w*|\bFloat8_e\w+",
             "uses 8-bit floats", precision="fp8"),
    cpp_rule("reduced_precision", r"\bprecision\s*::\s*tf32\b|__float_to_tf32|\.tf32\b|"
             r"CUBLAS_TF32_TENSOR_OP_MATH|CUBLAS_COMPUTE_32F_FAST_\w+|CUBLAS_TENSOR_OP_MATH",
             "uses TF32 tensor-core math for float32", precision="tf32"),
)

TF32_NAMES = (
    "torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.fp32_precision", "torch.backends.cudnn.conv.fp32_precision",
    "torch.backends.fp32_precision", "torch.backends.cudnn.rnn.fp32_precision",
)


def on_call(eng: Any, node: ast.Call, fn: str | None, method: str | None) -> None:
    if method in ("half", "bfloat16") and not node.args and not node.keywords:
        fam = "fp16" if method == "half" else "bf16"
        if fam not in eng.precisions:
            eng.add("reduced_precision", node, f".{method}() casts to reduced precision")
    if fn == "triton.language.dot" and "tf32" not in eng.precisions:
        for kw in node.keywords:
            v = eng.index.const_str(kw.value)
            if (kw.arg == "allow_tf32" and isinstance(kw.value, ast.Constant)
                    and kw.value.value is True) or (kw.arg == "input_precision" and v == "tf32"):
                eng.add("reduced_precision", node, "tl.dot with TF32 input precision")
    if fn == "torch.set_float32_matmul_precision" and node.args \
            and eng.index.const_str(node.args[0]) in ("high", "medium") \
            and "tf32" not in eng.precisions:
        eng.add("reduced_precision", node, "float32 matmuls may use TF32/bf16 math")


def on_patch(eng: Any, node: ast.AST, target: str, verb: str) -> bool:
    if target in TF32_NAMES and "tf32" not in eng.precisions:
        eng.add("reduced_precision", node, f"{verb} {target}: enables TF32/reduced precision "
                "math for float32")
    return False  # also a global flag


# ---- the reference's own precision ---------------------------------------------------------

_REF_PRECISION = {
    "fp16": re.compile(r"(?<!b)float16|\bhalf\b|\.half\(|HalfTensor|kHalf|__half|\bfp16\b|\bf16\b"),
    "bf16": re.compile(r"bfloat16|\bbf16\b|kBFloat16|BFloat16"),
    "fp8": re.compile(r"float8|\bfp8\b|e4m3|e5m2"),
    "tf32": re.compile(r"allow_tf32\s*=\s*True|tf32|"
                       r"set_float32_matmul_precision\(\s*['\"](?:high|medium)"),
    "autocast": re.compile(r"autocast"),
}


def reference_precisions(reference_source: str | None) -> frozenset[str]:
    """The reduced-precision families the reference source mentions (fp16, bf16, fp8, ...)."""
    if not reference_source:
        return frozenset()
    fams = {fam for fam, rx in _REF_PRECISION.items() if rx.search(reference_source)}
    if fams & {"fp16", "bf16"}:
        fams.add("autocast")  # autocast to a dtype the reference already runs in
    return frozenset(fams)
