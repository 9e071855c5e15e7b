# ruff: noqa
# task: L1/3
# style: cuda_inline, templated_source
# device: cuda
# expect: OK
# speedup: >=1.2
# why: one thread per (batch, pixel) walks the channels twice (sum of squares, then scale) with coalesced reads along the pixels; the kernel source is produced by a function from the unroll factor
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

UNROLL = 4


def _kernel_source(unroll):
    return r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

__global__ void rms_channels(const float* __restrict__ x, float* __restrict__ y, int64_t C, int64_t S, int64_t total, float eps) {
    const int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= total) return;
    const int64_t b = p / S, s = p % S;
    const float* base = x + b * C * S + s;
    float acc = 0.0f;
    #pragma unroll UNROLL_FACTOR
    for (int64_t c = 0; c < C; ++c) { const float v = base[c * S]; acc += v * v; }
    const float inv = rsqrtf(acc / (float)C + eps);
    float* obase = y + b * C * S + s;
    #pragma unroll UNROLL_FACTOR
    for (int64_t c = 0; c < C; ++c) obase[c * S] = base[c * S] * inv;
}

torch::Tensor rms_norm_cuda(torch::Tensor x, double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 3, "(B, C, S) float32 CUDA tensor expected");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t B = x.size(0), C = x.size(1), S = x.size(2), total = B * S;
    if (total == 0) return y;
    const int threads = 256;
    const int64_t blocks = (total + threads - 1) / threads;
    rms_channels<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), C, S, total, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
""".replace("UNROLL_FACTOR", str(unroll))


_ext = load_inline(
    name=f"honest_cuda_rms_channels_u{UNROLL}",
    cpp_sources="torch::Tensor rms_norm_cuda(torch::Tensor x, double eps);",
    cuda_sources=_kernel_source(UNROLL),
    functions=["rms_norm_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, num_features, eps):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        flat = x.reshape(x.shape[0], x.shape[1], -1)
        return _ext.rms_norm_cuda(flat, float(self.eps)).view(x.shape)
