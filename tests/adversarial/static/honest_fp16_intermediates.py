# ruff: noqa
# expect: none
# fp16 intermediates in CUDA (policy role: allowed under honest, rejected under paper).
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
#include <torch/extension.h>
#include <cuda_fp16.h>
__global__ void sq(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { __half h = __float2half(x[i]); y[i] = __half2float(__hmul(h, h)); }
}
torch::Tensor square(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    sq<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
mod = load_inline(name="fp16_sq", cpp_sources="torch::Tensor square(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["square"])


class ModelNew(nn.Module):
    def forward(self, x):
        return mod.square(x)
