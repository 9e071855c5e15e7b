# ruff: noqa
# task: L2/7
# style: cuda_inline, cpp_side_stream
# device: cuda
# expect: OK
# speedup: >=1.5
# why: one fused pass (three reads, one write) split over the current stream and a pool stream; the side stream first waits for the current one and the current stream waits for the side stream's event before the function returns (H100: 1.71x and 1.63x; the second stream adds an event record and wait per call, which the bandwidth-bound halves do not win back)
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

__global__ void gate_kernel(const float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ g,
                            float* __restrict__ out, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float a = 1.0f / (1.0f + __expf(-g[i]));
        out[i] = x[i] + a * (y[i] - x[i]);
    }
}

static void launch(const float* x, const float* y, const float* g, float* out, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 4096);
    gate_kernel<<<blocks, threads, 0, s>>>(x, y, g, out, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor gated_residual_two_streams(torch::Tensor x, torch::Tensor y, torch::Tensor g) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA tensors expected");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous(); y = y.contiguous(); g = g.contiguous();
    auto out = torch::empty_like(x);
    const int64_t n = x.numel(), half = n / 2;
    auto main = at::cuda::getCurrentCUDAStream();
    auto side = at::cuda::getStreamFromPool(false, x.device().index());
    at::cuda::CUDAEvent inputs_ready, side_done;
    inputs_ready.record(main);
    inputs_ready.block(side);                   // side stream starts after the inputs exist
    launch(x.data_ptr<float>(), y.data_ptr<float>(), g.data_ptr<float>(), out.data_ptr<float>(), half, main.stream());
    launch(x.data_ptr<float>() + half, y.data_ptr<float>() + half, g.data_ptr<float>() + half,
           out.data_ptr<float>() + half, n - half, side.stream());
    side_done.record(side);
    side_done.block(main);                      // joined: later work on the caller's stream sees the whole output
    return out;
}
"""

_ext = load_inline(
    name="honest_cuda_gated_residual_two_streams",
    cpp_sources="torch::Tensor gated_residual_two_streams(torch::Tensor x, torch::Tensor y, torch::Tensor g);",
    cuda_sources=_CUDA,
    functions=["gated_residual_two_streams"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y, g):
        return _ext.gated_residual_two_streams(x, y, g)
