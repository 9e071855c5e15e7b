import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>

// Causal moving average of each row of a contiguous (rows, T) float32 tensor with a running
// double sum: O(T) per row whatever the window. Eight rows advance together (independent chains).
torch::Tensor causal_moving_average(torch::Tensor x, int64_t window) {
    TORCH_CHECK(x.device().is_cpu(), "causal_moving_average: expected a CPU tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "causal_moving_average: expected float32");
    TORCH_CHECK(x.dim() == 2, "causal_moving_average: expected a 2-D tensor");
    TORCH_CHECK(window >= 1, "causal_moving_average: window must be >= 1");
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t rows = x.size(0);
    const int64_t n = x.size(1);
    const float* src = x.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const double inv_w = 1.0 / static_cast<double>(window);
    const int64_t groups = (rows + 7) / 8;
    #pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
        const int64_t r0 = g * 8;
        const int64_t r1 = std::min<int64_t>(rows, r0 + 8);
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t r = r0; r < r1; ++r) {
                const float* s = src + r * n;
                double a = acc[r - r0] + s[t];
                if (t >= window) a -= s[t - window];
                acc[r - r0] = a;
                dst[r * n + t] = static_cast<float>(a * inv_w);
            }
        }
    }
    return out;
}
"""

_ext = load_inline(
    name="evalfarm_builtin_moving_average_v1",
    cpp_sources=_SRC,
    functions=["causal_moving_average"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    """OpenMP C++ running-sum moving average: one read and one write per element."""

    def __init__(self, window):
        super().__init__()
        self.window = window

    def forward(self, x):
        shape = x.shape
        t = shape[-1]
        rows = x.numel() // t if t else 0
        out = _ext.causal_moving_average(x.reshape(rows, t).float().contiguous(), self.window)
        return out.view(shape).to(x.dtype)
