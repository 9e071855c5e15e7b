# ruff: noqa
# expect: none
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = """
#include <torch/extension.h>
// OpenMP parallel for joins before returning; comments mentioning std::thread are ignored
torch::Tensor add_cpu(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    int64_t n = a.numel();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
    return out;
}
torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);
"""
cuda_src = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_fp16.h>
__global__ void add_kernel(const float* a, const float* b, float* o, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int half = blockDim.x / 2;  // a variable named half is not half precision
    if (i < n) o[i] = a[i] + b[i] + 0 * half;
}
torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int64_t n = a.numel();
    auto stream = at::cuda::getCurrentCUDAStream();
    add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""
BLOCK = 256
module = load_inline(
    name="honest_add",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["add_cpu", "add_cuda"],
    extra_cflags=["-O3", "-fopenmp", f"-DBLOCK={BLOCK}"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = module

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        if a.is_cuda:
            return self.ext.add_cuda(a, b)
        return module.add_cpu(a, b)
