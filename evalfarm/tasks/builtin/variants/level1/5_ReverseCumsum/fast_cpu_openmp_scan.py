import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>

// Suffix sums of each row of a contiguous (rows, n) float32 tensor, accumulated in double.
// Eight rows are scanned together so the eight dependency chains overlap in the pipeline.
torch::Tensor reverse_cumsum_rows(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "reverse_cumsum_rows: expected a CPU tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "reverse_cumsum_rows: expected float32");
    TORCH_CHECK(x.dim() == 2, "reverse_cumsum_rows: expected a 2-D tensor");
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t rows = x.size(0);
    const int64_t n = x.size(1);
    const float* src = x.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const int64_t groups = (rows + 7) / 8;
    #pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
        const int64_t r0 = g * 8;
        const int64_t nr = std::min<int64_t>(8, rows - r0);
        if (nr == 8) {
            double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int64_t i = n - 1; i >= 0; --i) {
                for (int k = 0; k < 8; ++k) {
                    acc[k] += src[(r0 + k) * n + i];
                    dst[(r0 + k) * n + i] = static_cast<float>(acc[k]);
                }
            }
        } else {
            for (int64_t r = r0; r < r0 + nr; ++r) {
                double acc = 0.0;
                for (int64_t i = n - 1; i >= 0; --i) {
                    acc += src[r * n + i];
                    dst[r * n + i] = static_cast<float>(acc);
                }
            }
        }
    }
    return out;
}
"""

_ext = load_inline(
    name="evalfarm_builtin_reverse_cumsum_v1",
    cpp_sources=_SRC,
    functions=["reverse_cumsum_rows"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    """One pass: an OpenMP C++ suffix scan per row instead of flip + cumsum + flip."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        moved = x.movedim(self.dim, -1)
        shape = moved.shape
        n = shape[-1]
        rows = moved.numel() // n if n else 0
        out = _ext.reverse_cumsum_rows(moved.reshape(rows, n).float().contiguous())
        return out.view(shape).movedim(-1, self.dim).to(x.dtype)
