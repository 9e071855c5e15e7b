# ruff: noqa
# task: L2/8
# style: cuda_inline, templated_source, algebraic_shortcut
# device: cuda
# expect: OK
# speedup: >=2
# why: one warp per row computes logsumexp(z) - z[target] (what the one-hot product picks out) in a single read of the logits; the per-row losses are averaged with torch's mean; the warp count is substituted with str.replace
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

WARPS_PER_BLOCK = 4

_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

__global__ void row_nll(const float* __restrict__ z, const int64_t* __restrict__ t, float* __restrict__ loss,
                        int64_t rows, int64_t C) {
    const int64_t row = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* zr = z + row * C;
    float m = -INFINITY, s = 0.0f;   // online logsumexp per lane
    for (int64_t j = lane; j < C; j += 32) {
        const float v = zr[j];
        if (v > m) { s = s * __expf(m - v) + 1.0f; m = v; } else { s += __expf(v - m); }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffff, m, o), s2 = __shfl_xor_sync(0xffffffff, s, o);
        const float mm = fmaxf(m, m2);
        s = (m == -INFINITY ? 0.0f : s * __expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * __expf(m2 - mm));
        m = mm;
    }
    if (lane == 0) loss[row] = m + logf(s) - zr[t[row]];
}

torch::Tensor per_row_nll(torch::Tensor z, torch::Tensor t) {
    TORCH_CHECK(z.is_cuda() && z.scalar_type() == torch::kFloat32 && t.scalar_type() == torch::kLong, "float32 logits, int64 targets");
    const c10::cuda::CUDAGuard guard(z.device());
    z = z.contiguous(); t = t.contiguous();
    const int64_t rows = z.size(0), C = z.size(1);
    auto loss = torch::empty({rows}, z.options());
    if (rows == 0) return loss;
    const int64_t blocks = (rows + WARPS - 1) / WARPS;
    row_nll<<<blocks, WARPS * 32, 0, at::cuda::getCurrentCUDAStream()>>>(z.data_ptr<float>(), t.data_ptr<int64_t>(), loss.data_ptr<float>(), rows, C);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return loss;
}
"""

_ext = load_inline(
    name=f"honest_cuda_row_nll_w{WARPS_PER_BLOCK}",
    cpp_sources="torch::Tensor per_row_nll(torch::Tensor z, torch::Tensor t);",
    cuda_sources=_SRC.replace("WARPS", str(WARPS_PER_BLOCK)),
    functions=["per_row_nll"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return _ext.per_row_nll(logits, targets).mean()
