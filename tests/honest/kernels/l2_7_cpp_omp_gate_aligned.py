# ruff: noqa
# task: L2/7
# style: cpp_openmp, data_ptr_alignment
# device: cpu
# expect: OK
# speedup: >=1.4
# why: sigmoid gate and interpolation in one OpenMP pass over three inputs; the Python side checks .data_ptr() alignment and contiguity and copies only inputs that would break the kernel's 16-byte vector loads
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor gated_residual(torch::Tensor x, torch::Tensor y, torch::Tensor g) {
    TORCH_CHECK(x.is_contiguous() && y.is_contiguous() && g.is_contiguous(), "contiguous inputs expected");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 expected");
    auto out = torch::empty_like(x);
    const float* __restrict__ px = (const float*)__builtin_assume_aligned(x.data_ptr<float>(), 16);
    const float* __restrict__ py = (const float*)__builtin_assume_aligned(y.data_ptr<float>(), 16);
    const float* __restrict__ pg = (const float*)__builtin_assume_aligned(g.data_ptr<float>(), 16);
    float* __restrict__ po = out.data_ptr<float>();
    const int64_t n = x.numel();
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const float a = 1.0f / (1.0f + std::exp(-pg[i]));
        po[i] = px[i] + a * (py[i] - px[i]);
    }
    return out;
}
"""

_ext = load_inline(
    name="honest_cpu_gated_residual_aligned_v2",
    cpp_sources=_SRC,
    functions=["gated_residual"],
    extra_cflags=["-O3", "-march=native", "-ffast-math", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


def _aligned(t):
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    return t.contiguous().clone()  # fresh allocations are at least 64-byte aligned


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y, g):
        return _ext.gated_residual(_aligned(x), _aligned(y), _aligned(g))
