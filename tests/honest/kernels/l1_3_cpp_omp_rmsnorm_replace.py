# ruff: noqa
# task: L1/3
# style: cpp_openmp, templated_source
# device: cpu
# expect: OK
# speedup: >=1.3
# why: RMS norm over channels in one OpenMP kernel with the spatial block size substituted into the source by str.replace from a module constant; each block is read twice (sum of squares, scale) while it is in cache
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

BLOCK = 512

_TEMPLATE = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor rms_norm_channels(torch::Tensor x, double eps) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.dim() == 3, "(B, C, S) float32 CPU tensor expected");
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t B = x.size(0), C = x.size(1), S = x.size(2);
    const float* src = x.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const int64_t blocks = (S + @BLOCK@ - 1) / @BLOCK@;
    const float inv_c = 1.0f / (float)C, feps = (float)eps;
    #pragma omp parallel for schedule(static)
    for (int64_t item = 0; item < B * blocks; ++item) {
        const int64_t b = item / blocks, s0 = (item % blocks) * @BLOCK@;
        const int64_t len = std::min<int64_t>(@BLOCK@, S - s0);
        float acc[@BLOCK@];
        for (int64_t j = 0; j < len; ++j) acc[j] = 0.0f;
        for (int64_t c = 0; c < C; ++c) {
            const float* row = src + (b * C + c) * S + s0;
            #pragma omp simd
            for (int64_t j = 0; j < len; ++j) acc[j] += row[j] * row[j];
        }
        #pragma omp simd
        for (int64_t j = 0; j < len; ++j) acc[j] = 1.0f / std::sqrt(acc[j] * inv_c + feps);
        for (int64_t c = 0; c < C; ++c) {
            const float* row = src + (b * C + c) * S + s0;
            float* orow = dst + (b * C + c) * S + s0;
            #pragma omp simd
            for (int64_t j = 0; j < len; ++j) orow[j] = row[j] * acc[j];
        }
    }
    return out;
}
"""

_ext = load_inline(
    name=f"honest_cpu_rms_norm_b{BLOCK}",
    cpp_sources=_TEMPLATE.replace("@BLOCK@", str(BLOCK)),
    functions=["rms_norm_channels"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, num_features, eps):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        flat = x.reshape(x.shape[0], x.shape[1], -1)
        return _ext.rms_norm_channels(flat, float(self.eps)).view(x.shape)
