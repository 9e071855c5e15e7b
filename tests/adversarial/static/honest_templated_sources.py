# ruff: noqa
# expect: none
# load_inline / cupy sources built at run time from module constants: a builder function,
# .format, .replace and an f-string.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_TEMPLATE = """
#include <torch/extension.h>
__global__ void scale_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)BLOCK + threadIdx.x;
    if (i < n) y[i] = x[i] * SCALE;
}
torch::Tensor scale(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    scale_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
_DECL = "torch::Tensor {name}(torch::Tensor x);"


def _make_source(block, scale):
    src = _TEMPLATE.replace("BLOCK", str(block))
    src = src.replace("SCALE", f"{scale}f")
    return src


def _header(name):
    return f"// generated for {name}\n" + _DECL.format(name=name)


CUDA_SRC = _make_source(256, 2.0)
module = load_inline(name="templated_scale", cpp_sources=_header("scale"),
                     cuda_sources=CUDA_SRC, functions=["scale"])


class ModelNew(nn.Module):
    def __init__(self, block: int = 128):
        super().__init__()
        src = f"""
extern "C" __global__ void add_one(const float* x, float* y, int n) {{
    int i = blockIdx.x * {block} + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}}
"""
        self.block = block
        self.k = load_inline(name="templated_add", cpp_sources=_DECL.format(name="add"),
                             cuda_sources=src, functions=["add"])

    def forward(self, x):
        return module.scale(x)
