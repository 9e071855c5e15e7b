import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The C++ twin of tests/data/gpu/cand_side_stream.py: the work goes to a non-blocking stream the
# extension creates itself (no implicit ordering with torch's stream) and the call returns
# without waiting for it.
CPP = r"""
#include <torch/extension.h>
#include <cuda_runtime_api.h>
void launch_relu(const float* x, float* y, long n, cudaStream_t stream);
torch::Tensor run(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32);
  auto y = torch::empty_like(x);
  cudaStream_t side;
  TORCH_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreateWithFlags");
  for (int k = 0; k < 3; ++k) {
    launch_relu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), side);
  }
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "launching relu failed");
  TORCH_CHECK(cudaStreamDestroy(side) == cudaSuccess, "cudaStreamDestroy");  // released once its work is done
  return y;
}
"""
CUDA = r"""
#include <cuda_runtime.h>
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
void launch_relu(const float* x, float* y, long n, cudaStream_t stream) {
  relu_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
"""
ext = load_inline(name="evalfarm_adv_side_stream", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"],
                  no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
