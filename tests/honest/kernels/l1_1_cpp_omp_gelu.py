# ruff: noqa
# task: L1/1
# style: cpp_openmp
# device: cpu
# expect: OK
# speedup: >=3
# why: the whole tanh-GELU formula in one OpenMP loop over the elements: written as v / (1 + exp(-2u)) (the same function) so the exp vectorizes; one read and one write instead of eight passes with temporaries
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor gelu_tanh_omp(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "gelu_tanh_omp: float32 CPU tensor expected");
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* src = x.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const int64_t n = x.numel();
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const float v = src[i];
        // 0.5 v (1 + tanh(u)) = v / (1 + exp(-2u)): one exp, which vectorizes
        dst[i] = v / (1.0f + std::exp(-2.0f * k0 * (v + k1 * v * v * v)));
    }
    return out;
}
"""

_ext = load_inline(
    name="honest_cpu_gelu_tanh_omp_v2",
    cpp_sources=_SRC,
    functions=["gelu_tanh_omp"],
    extra_cflags=["-O3", "-march=native", "-ffast-math", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.gelu_tanh_omp(x)
