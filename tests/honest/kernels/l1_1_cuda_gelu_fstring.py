# ruff: noqa
# task: L1/1
# style: cuda_inline, templated_source
# device: cuda
# expect: OK
# speedup: >=2
# why: the tanh-GELU formula in one CUDA kernel, float4 loads for the aligned body; block size and vector width come from module constants through an f-string
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

THREADS = 256
VEC = 4

_CPP = "torch::Tensor gelu_tanh_cuda(torch::Tensor x);"

_CUDA = f"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

__device__ __forceinline__ float gelu_tanh(float v) {{
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}}

__global__ void gelu_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t n) {{
    const int64_t nv = n / {VEC};
    const int64_t stride = (int64_t)gridDim.x * {THREADS};
    const int64_t tid = (int64_t)blockIdx.x * {THREADS} + threadIdx.x;
    for (int64_t i = tid; i < nv; i += stride) {{
        float4 v = reinterpret_cast<const float4*>(in)[i];
        v.x = gelu_tanh(v.x); v.y = gelu_tanh(v.y); v.z = gelu_tanh(v.z); v.w = gelu_tanh(v.w);
        reinterpret_cast<float4*>(out)[i] = v;
    }}
    for (int64_t i = nv * {VEC} + tid; i < n; i += stride) out[i] = gelu_tanh(in[i]);
}}

torch::Tensor gelu_tanh_cuda(torch::Tensor x) {{
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA tensor expected");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return out;
    const int64_t want = (n / {VEC} + {THREADS} - 1) / {THREADS};
    const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>(want, 65535));
    gelu_kernel<<<blocks, {THREADS}, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}}
"""

_ext = load_inline(
    name=f"honest_cuda_gelu_t{THREADS}_v{VEC}",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["gelu_tanh_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.gelu_tanh_cuda(x)
