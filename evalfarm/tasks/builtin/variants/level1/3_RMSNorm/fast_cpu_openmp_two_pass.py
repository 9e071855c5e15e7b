import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
#include <cmath>

// RMS norm over dim 1 of a contiguous (B, C, S) float32 tensor. Work items are (batch, chunk of
// S); within a chunk the sum of squares over C and the scaling are vectorizable loops over S
// and the chunk stays in cache between the two passes. Built with -march=native (it is compiled
// on the machine that runs it): AVX2 instead of SSE2 cuts the time by about a third.
torch::Tensor rms_norm_dim1(torch::Tensor x, double eps) {
    TORCH_CHECK(x.device().is_cpu(), "rms_norm_dim1: expected a CPU tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "rms_norm_dim1: expected float32");
    TORCH_CHECK(x.dim() == 3, "rms_norm_dim1: expected (B, C, S)");
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t B = x.size(0), C = x.size(1), S = x.size(2);
    const float* src = x.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    constexpr int64_t CHUNK = 256;
    const int64_t chunks = (S + CHUNK - 1) / CHUNK;
    const float inv_c = 1.0f / static_cast<float>(C);
    const float feps = static_cast<float>(eps);
    #pragma omp parallel for schedule(static)
    for (int64_t item = 0; item < B * chunks; ++item) {
        const int64_t b = item / chunks;
        const int64_t s0 = (item % chunks) * CHUNK;
        const int64_t len = std::min<int64_t>(CHUNK, S - s0);
        float acc[CHUNK];
        for (int64_t j = 0; j < len; ++j) acc[j] = 0.0f;
        const float* base = src + b * C * S + s0;
        float* obase = dst + b * C * S + s0;
        for (int64_t c = 0; c < C; ++c) {
            const float* row = base + c * S;
            #pragma omp simd
            for (int64_t j = 0; j < len; ++j) acc[j] += row[j] * row[j];
        }
        #pragma omp simd
        for (int64_t j = 0; j < len; ++j) acc[j] = 1.0f / std::sqrt(acc[j] * inv_c + feps);
        for (int64_t c = 0; c < C; ++c) {
            const float* row = base + c * S;
            float* orow = obase + c * S;
            #pragma omp simd
            for (int64_t j = 0; j < len; ++j) orow[j] = row[j] * acc[j];
        }
    }
    return out;
}
"""

_ext = load_inline(
    name="evalfarm_builtin_rms_norm_v2",
    cpp_sources=_SRC,
    functions=["rms_norm_dim1"],
    extra_cflags=["-O3", "-march=native", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    """Cache-blocked OpenMP C++ RMS norm: x is read twice per block, written once."""

    def __init__(self, num_features, eps):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        b, c = x.shape[0], x.shape[1]
        flat = x.reshape(b, c, -1).float().contiguous()
        return _ext.rms_norm_dim1(flat, float(self.eps)).view(x.shape).to(x.dtype)
