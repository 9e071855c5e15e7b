# ruff: noqa
# task: L2/3
# style: cuda_inline, templated_source
# device: cuda
# expect: OK
# speedup: >=1.3
# why: one warp per row keeps the row in registers: scale, bias add, max, exp-sum and normalise with one read and one write; the per-lane register count is substituted into the source with str.replace
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

MAX_PER_LANE = 32  # rows up to 32 * 32 = 1024 long

_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

__global__ void softmax_scale_bias_rows(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y,
                                       int64_t rows, int64_t brows, int S, float scale) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* xr = x + row * S;
    const float* br = bias + (row % brows) * S;
    float v[@PER_LANE@];
    float m = -INFINITY;
    #pragma unroll
    for (int k = 0; k < @PER_LANE@; ++k) {
        const int j = lane + 32 * k;
        v[k] = j < S ? xr[j] * scale + br[j] : -INFINITY;
        m = fmaxf(m, v[k]);
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    float sum = 0.0f;
    #pragma unroll
    for (int k = 0; k < @PER_LANE@; ++k) {
        const int j = lane + 32 * k;
        v[k] = j < S ? __expf(v[k] - m) : 0.0f;
        sum += v[k];
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, o);
    const float inv = 1.0f / sum;
    float* yr = y + row * S;
    #pragma unroll
    for (int k = 0; k < @PER_LANE@; ++k) {
        const int j = lane + 32 * k;
        if (j < S) yr[j] = v[k] * inv;
    }
}

torch::Tensor softmax_scale_bias(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32, "float32 CUDA tensors expected");
    const int S = (int)x.size(-1);
    TORCH_CHECK(S <= 32 * @PER_LANE@, "row too long for this build");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    bias = bias.contiguous();
    auto y = torch::empty_like(x);
    const int64_t rows = x.numel() / S;
    if (rows == 0) return y;
    const int warps = 8;
    const int64_t blocks = (rows + warps - 1) / warps;
    softmax_scale_bias_rows<<<blocks, warps * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), rows, bias.size(0), S, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name=f"honest_cuda_softmax_scale_bias_{MAX_PER_LANE}",
    cpp_sources="torch::Tensor softmax_scale_bias(torch::Tensor x, torch::Tensor bias, double scale);",
    cuda_sources=_SRC.replace("@PER_LANE@", str(MAX_PER_LANE)),
    functions=["softmax_scale_bias"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, scores, bias):
        return _ext.softmax_scale_bias(scores, bias, float(self.scale))
