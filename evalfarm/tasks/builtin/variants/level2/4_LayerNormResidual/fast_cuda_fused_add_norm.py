import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = (
    "torch::Tensor add_layer_norm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight,"
    " torch::Tensor bias, double eps);"
)

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

__device__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? shared[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) shared[32] = v;
    }
    __syncthreads();
    const float result = shared[32];
    __syncthreads();
    return result;
}

// One block per row: h = x + residual is written to out, then mean and (two-pass) variance are
// reduced over the row, then out is normalized in place. Each thread re-reads only the elements
// it wrote itself, so no extra synchronization is needed between the passes.
__global__ void add_layer_norm_kernel(const float* __restrict__ x, const float* __restrict__ r,
                                      const float* __restrict__ w, const float* __restrict__ b,
                                      float* __restrict__ out, int64_t D, float eps) {
    __shared__ float shared[33];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * D;
    const float* rr = r + row * D;
    float* o = out + row * D;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
        const float h = xr[j] + rr[j];
        o[j] = h;
        s += h;
    }
    const float mean = block_sum(s, shared) / (float)D;
    float v = 0.0f;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
        const float d = o[j] - mean;
        v = fmaf(d, d, v);
    }
    const float var = block_sum(v, shared) / (float)D;
    const float rstd = 1.0f / sqrtf(var + eps);
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) o[j] = (o[j] - mean) * rstd * w[j] + b[j];
}

torch::Tensor add_layer_norm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight,
                             torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && residual.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "add_layer_norm: expected CUDA tensors");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && residual.scalar_type() == torch::kFloat32 &&
                weight.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32,
                "add_layer_norm: expected float32");
    TORCH_CHECK(x.sizes() == residual.sizes(), "add_layer_norm: x and residual differ in shape");
    const int64_t D = x.size(-1);
    TORCH_CHECK(weight.numel() == D && bias.numel() == D, "add_layer_norm: bad weight/bias size");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    residual = residual.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    auto out = torch::empty_like(x);
    if (x.numel() == 0) return out;
    const int64_t rows = x.numel() / D;
    const int threads = D >= 2048 ? 512 : 256;
    add_layer_norm_kernel<<<(unsigned)rows, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), residual.data_ptr<float>(), weight.data_ptr<float>(),
        bias.data_ptr<float>(), out.data_ptr<float>(), D, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="evalfarm_builtin_cuda_add_layer_norm_v1",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["add_layer_norm"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    """Residual add and LayerNorm in one CUDA kernel (one block per row)."""

    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x, residual):
        out = _ext.add_layer_norm(
            x.float(), residual.float(), self.weight.float(), self.bias.float(), float(self.eps)
        )
        return out.to(x.dtype)
