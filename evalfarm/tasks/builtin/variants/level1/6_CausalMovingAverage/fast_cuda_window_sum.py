import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor causal_moving_average(torch::Tensor x, int64_t window);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

// One thread per output: the block stages its span of the row plus the (window - 1) elements
// before it in shared memory, so each input is read from global memory about once.
__global__ void causal_moving_average_kernel(const float* __restrict__ x, float* __restrict__ out,
                                             int64_t T, int window, float inv_w) {
    extern __shared__ float tile[];
    const int64_t row = blockIdx.y;
    const int64_t t0 = (int64_t)blockIdx.x * blockDim.x;
    const float* src = x + row * T;
    const int halo = window - 1;
    const int span = blockDim.x + halo;
    for (int i = threadIdx.x; i < span; i += blockDim.x) {
        const int64_t t = t0 - halo + i;
        tile[i] = (t >= 0 && t < T) ? src[t] : 0.0f;
    }
    __syncthreads();
    const int64_t t = t0 + threadIdx.x;
    if (t >= T) return;
    float acc = 0.0f;
    for (int k = 0; k < window; ++k) acc += tile[threadIdx.x + k];
    out[row * T + t] = acc * inv_w;
}

torch::Tensor causal_moving_average(torch::Tensor x, int64_t window) {
    TORCH_CHECK(x.is_cuda(), "causal_moving_average: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "causal_moving_average: expected float32");
    TORCH_CHECK(x.dim() == 2, "causal_moving_average: expected (rows, T)");
    TORCH_CHECK(window >= 1 && window <= 4096, "causal_moving_average: window out of range");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t rows = x.size(0), T = x.size(1);
    if (rows == 0 || T == 0) return out;
    TORCH_CHECK(rows <= 65535, "causal_moving_average: too many rows for gridDim.y");
    const int threads = 256;
    const dim3 grid((unsigned)((T + threads - 1) / threads), (unsigned)rows);
    const size_t smem = (threads + window - 1) * sizeof(float);
    causal_moving_average_kernel<<<grid, threads, smem, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), T, (int)window, 1.0f / (float)window);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="evalfarm_builtin_cuda_moving_average_v1",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["causal_moving_average"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    """Padding and pooling fused in one CUDA kernel with a shared-memory tile of each row."""

    def __init__(self, window):
        super().__init__()
        self.window = window

    def forward(self, x):
        shape = x.shape
        t = shape[-1]
        rows = x.numel() // t if t else 0
        out = _ext.causal_moving_average(x.reshape(rows, t).float(), self.window)
        return out.view(shape).to(x.dtype)
