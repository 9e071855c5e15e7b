# ruff: noqa
# task: L1/6
# style: cpp_openmp, templated_source
# device: cpu
# expect: OK
# speedup: >=2
# why: a running window sum (add the entering sample, drop the leaving one) in double precision per row, OpenMP over rows; the source is an f-string over the module's accumulator-type constant
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ACC = "double"

_SRC = f"""
#include <torch/extension.h>

torch::Tensor causal_window_mean(torch::Tensor x, int64_t window) {{
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "2-D float32 CPU tensor expected");
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t rows = x.size(0), len = x.size(1);
    const float* src = x.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const {ACC} inv = 1.0 / ({ACC})window;
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {{
        const float* s = src + r * len;
        float* d = dst + r * len;
        {ACC} acc = 0;
        for (int64_t t = 0; t < len; ++t) {{
            acc += s[t];
            if (t >= window) acc -= s[t - window];
            d[t] = (float)(acc * inv);
        }}
    }}
    return out;
}}
"""

_ext = load_inline(
    name=f"honest_cpu_causal_window_{ACC}",
    cpp_sources=_SRC,
    functions=["causal_window_mean"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, window):
        super().__init__()
        self.window = window

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        return _ext.causal_window_mean(flat, int(self.window)).view(x.shape)
