import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor rms_norm_dim1(torch::Tensor x, double eps);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

// One thread per (batch, spatial position): it loops over the C channels twice (sum of squares,
// then scale). Neighbouring threads touch neighbouring positions, so every access is coalesced;
// the second pass mostly hits L2.
__global__ void rms_norm_dim1_kernel(const float* __restrict__ x, float* __restrict__ out,
                                     int64_t B, int64_t C, int64_t S, float eps) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * S) return;
    const int64_t b = idx / S;
    const int64_t s = idx % S;
    const float* base = x + b * C * S + s;
    float* obase = out + b * C * S + s;
    float acc = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
        const float v = base[c * S];
        acc = fmaf(v, v, acc);
    }
    const float inv = 1.0f / sqrtf(acc / (float)C + eps);
    for (int64_t c = 0; c < C; ++c) obase[c * S] = base[c * S] * inv;
}

torch::Tensor rms_norm_dim1(torch::Tensor x, double eps) {
    TORCH_CHECK(x.is_cuda(), "rms_norm_dim1: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "rms_norm_dim1: expected float32");
    TORCH_CHECK(x.dim() == 3, "rms_norm_dim1: expected (B, C, S)");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t B = x.size(0), C = x.size(1), S = x.size(2);
    const int64_t n = B * S;
    if (n == 0 || C == 0) return out;
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    rms_norm_dim1_kernel<<<(unsigned)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), B, C, S, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="evalfarm_builtin_cuda_rms_norm_v1",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["rms_norm_dim1"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    """RMS norm over channels in one CUDA kernel: no x**2 temporary, no separate division pass."""

    def __init__(self, num_features, eps):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        b, c = x.shape[0], x.shape[1]
        flat = x.reshape(b, c, -1).float()
        return _ext.rms_norm_dim1(flat, float(self.eps)).view(x.shape).to(x.dtype)
