# ruff: noqa
# task: L1/5
# style: cpp_openmp, templated_source
# device: cpu
# expect: OK
# speedup: >=1.1
# why: a reverse scan per row in one OpenMP loop (no flipped copies); the source is produced by a function from the accumulator type, here float like torch.cumsum
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ACC_TYPE = "float"


def _make_source(acc_type):
    return (
        "#include <torch/extension.h>\n"
        "torch::Tensor suffix_sum_rows(torch::Tensor x) {\n"
        "    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, \"2-D float32 CPU tensor expected\");\n"
        "    x = x.contiguous();\n"
        "    auto out = torch::empty_like(x);\n"
        "    const int64_t rows = x.size(0), len = x.size(1);\n"
        "    const float* src = x.data_ptr<float>();\n"
        "    float* dst = out.data_ptr<float>();\n"
        "    #pragma omp parallel for schedule(static)\n"
        "    for (int64_t r = 0; r < rows; ++r) {\n"
        f"        {acc_type} acc = 0;\n"
        "        const float* s = src + r * len;\n"
        "        float* d = dst + r * len;\n"
        "        for (int64_t i = len - 1; i >= 0; --i) { acc += s[i]; d[i] = (float)acc; }\n"
        "    }\n"
        "    return out;\n"
        "}\n"
    )


_ext = load_inline(
    name=f"honest_cpu_suffix_sum_{ACC_TYPE}",
    cpp_sources=_make_source(ACC_TYPE),
    functions=["suffix_sum_rows"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        moved = x.movedim(self.dim, -1)
        flat = moved.reshape(-1, moved.shape[-1])
        out = _ext.suffix_sum_rows(flat).view(moved.shape)
        return out.movedim(-1, self.dim)
