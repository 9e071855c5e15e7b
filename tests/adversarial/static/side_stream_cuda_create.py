# ruff: noqa
# expect: side_stream
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
__global__ void k(float* o, const float* a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = a[i]; }
torch::Tensor run(torch::Tensor a) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    auto o = torch::empty_like(a);
    k<<<(a.numel() + 255) / 256, 256, 0, s>>>(o.data_ptr<float>(), a.data_ptr<float>(), a.numel());
    return o;
}
"""
mod = load_inline(name="sc", cpp_sources="torch::Tensor run(torch::Tensor a);", cuda_sources=cuda_src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, a):
        return mod.run(a)
