# ruff: noqa
# task: L2/3
# style: cpp_openmp, templated_source
# device: cpu
# expect: OK
# speedup: >=1.2
# why: scale, bias add and a numerically stable softmax per row in one OpenMP loop (max, exp-and-sum, normalise on a row buffer); the source is filled in with str.format from module constants
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

MAX_ROW = 8192
FUNC = "softmax_scale_bias"

_TEMPLATE = r"""
#include <torch/extension.h>
#include <cmath>
#include <vector>

torch::Tensor {func}(torch::Tensor scores, torch::Tensor bias, double scale) {{
    TORCH_CHECK(scores.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32, "float32 expected");
    const int64_t S = scores.size(-1);
    TORCH_CHECK(S <= {max_row}, "row too long");
    TORCH_CHECK(bias.dim() == 2 && bias.size(1) == S, "bias must be (rows, S)");
    scores = scores.contiguous();
    bias = bias.contiguous();
    auto out = torch::empty_like(scores);
    const int64_t rows = scores.numel() / S, brows = bias.size(0);
    const float* x = scores.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    float* y = out.data_ptr<float>();
    const float fs = (float)scale;
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {{
        const float* xr = x + r * S;
        const float* br = b + (r % brows) * S;
        float* yr = y + r * S;
        float m = xr[0] * fs + br[0];
        for (int64_t j = 0; j < S; ++j) {{ const float v = xr[j] * fs + br[j]; yr[j] = v; m = std::max(m, v); }}
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int64_t j = 0; j < S; ++j) {{ const float e = std::exp(yr[j] - m); yr[j] = e; sum += e; }}
        const float inv = 1.0f / sum;
        #pragma omp simd
        for (int64_t j = 0; j < S; ++j) yr[j] *= inv;
    }}
    return out;
}}
"""

_ext = load_inline(
    name=f"honest_cpu_{FUNC}_v2",
    cpp_sources=_TEMPLATE.format(func=FUNC, max_row=MAX_ROW),
    functions=[FUNC],
    extra_cflags=["-O3", "-march=native", "-ffast-math", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, scores, bias):
        return getattr(_ext, FUNC)(scores, bias, float(self.scale))
