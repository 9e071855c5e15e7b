import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor run(torch::Tensor x);"
CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void bad_kernel(const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i + (1L << 40)] = x[i];  // far outside any allocation
}
torch::Tensor run(torch::Tensor x) {
  auto y = torch::empty_like(x);
  long n = x.numel();
  bad_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
ext = load_inline(name="evalfarm_gpu_illegal", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
