import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor new_gelu(torch::Tensor x);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

__device__ __forceinline__ float gelu_tanh(float x) {
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(k0 * (x + k1 * x * x * x)));
}

// One read and one write per element; float4 accesses for the aligned body, scalars for the tail.
__global__ void new_gelu_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t n) {
    const int64_t n4 = n / 4;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float4* in4 = reinterpret_cast<const float4*>(in);
    float4* out4 = reinterpret_cast<float4*>(out);
    for (int64_t i = tid; i < n4; i += stride) {
        float4 v = in4[i];
        v.x = gelu_tanh(v.x);
        v.y = gelu_tanh(v.y);
        v.z = gelu_tanh(v.z);
        v.w = gelu_tanh(v.w);
        out4[i] = v;
    }
    for (int64_t i = n4 * 4 + tid; i < n; i += stride) out[i] = gelu_tanh(in[i]);
}

torch::Tensor new_gelu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "new_gelu: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "new_gelu: expected float32");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int64_t want = (n / 4 + threads - 1) / threads;
    const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>(want, 132 * 32));
    new_gelu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="evalfarm_builtin_cuda_new_gelu_v1",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["new_gelu"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    """The whole tanh-GELU formula in one CUDA kernel (float4 loads and stores)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.new_gelu(x.float()).to(x.dtype)
