import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor gated_residual(torch::Tensor x, torch::Tensor y, torch::Tensor g);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

__device__ __forceinline__ float gate_mix(float x, float y, float g) {
    const float s = 1.0f / (1.0f + expf(-g));
    return x + s * (y - x);
}

// Reads x, y, g once and writes the result once: 16 bytes per element instead of ~40.
__global__ void gated_residual_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                      const float* __restrict__ g, float* __restrict__ out,
                                      int64_t n) {
    const int64_t n4 = n / 4;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* y4 = reinterpret_cast<const float4*>(y);
    const float4* g4 = reinterpret_cast<const float4*>(g);
    float4* o4 = reinterpret_cast<float4*>(out);
    for (int64_t i = tid; i < n4; i += stride) {
        const float4 a = x4[i], b = y4[i], c = g4[i];
        float4 r;
        r.x = gate_mix(a.x, b.x, c.x);
        r.y = gate_mix(a.y, b.y, c.y);
        r.z = gate_mix(a.z, b.z, c.z);
        r.w = gate_mix(a.w, b.w, c.w);
        o4[i] = r;
    }
    for (int64_t i = n4 * 4 + tid; i < n; i += stride) out[i] = gate_mix(x[i], y[i], g[i]);
}

torch::Tensor gated_residual(torch::Tensor x, torch::Tensor y, torch::Tensor g) {
    TORCH_CHECK(x.is_cuda() && y.is_cuda() && g.is_cuda(), "gated_residual: expected CUDA tensors");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && y.scalar_type() == torch::kFloat32 &&
                g.scalar_type() == torch::kFloat32, "gated_residual: expected float32");
    TORCH_CHECK(x.sizes() == y.sizes() && x.sizes() == g.sizes(), "gated_residual: shapes differ");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    y = y.contiguous();
    g = g.contiguous();
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int64_t want = (n / 4 + threads - 1) / threads;
    const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>(want, 132 * 32));
    gated_residual_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), g.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="evalfarm_builtin_cuda_gated_residual_v1",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["gated_residual"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    """Sigmoid gate and interpolation fused in one CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x, y, g):
        return _ext.gated_residual(x.float(), y.float(), g.float()).to(x.dtype)
