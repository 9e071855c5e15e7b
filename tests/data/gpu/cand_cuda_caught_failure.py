"""Two extensions: cand_cuda_relu.py's (built, cached, loaded and never called) and a broken copy
of it whose build failure the module catches; forward runs torch.relu. OK, with the failure in the
evidence and none of the call's GPU time in the candidate's own kernels."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor run(torch::Tensor x);"
CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
torch::Tensor run(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32);
  auto y = torch::empty_like(x);
  long n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""
unused = load_inline(name="evalfarm_gpu_relu", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"])
try:
    fast = load_inline(name="evalfarm_gpu_relu_broken", cpp_sources=CPP, functions=["run"],
                       cuda_sources=CUDA.replace("fmaxf(x[i], 0.0f);", "fmaxf(x[i], 0.0f)"))
except RuntimeError:
    fast = None


class ModelNew(nn.Module):
    def forward(self, x):
        return fast.run(x) if fast is not None else torch.relu(x)
