import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The kernel lives in the .cu file alone, without torch's headers (a quick compile); the
# binding in the C++ file enqueues it on torch's current stream, then torch's relu behind it.
CPP = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
void launch_spin(int* flag, cudaStream_t stream);
torch::Tensor run(torch::Tensor x) {
  auto flag = torch::zeros({1}, x.options().dtype(torch::kInt32));  // never set: spins forever
  launch_spin(flag.data_ptr<int>(), at::cuda::getCurrentCUDAStream());
  return torch::relu(x);
}
"""
CUDA = r"""
#include <cuda_runtime.h>
__global__ void spin_kernel(volatile int* flag, unsigned long long valve_ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (*flag == 0) {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    // A safety valve far beyond the judge's patience, so a device whose driver cannot kill the
    // context still comes back on its own one day.
    if (now - start > valve_ns) break;
  }
}
void launch_spin(int* flag, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(flag, 120ull * 1000000000ull);
}
"""
ext = load_inline(name="evalfarm_adv_spin", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"],
                  no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
