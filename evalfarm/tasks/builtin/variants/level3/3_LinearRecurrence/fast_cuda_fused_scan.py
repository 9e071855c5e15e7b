import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor gated_scan(torch::Tensor pre);"

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

// pre is (B, T, 2H): gate pre-activations in [..., :H], candidate pre-activations in [..., H:].
// One thread per (b, h) channel walks the T steps: a = sigmoid, u = tanh, h = a*h + (1-a)*u.
// Consecutive threads take consecutive channels, so every step's loads and stores are coalesced.
__global__ void gated_scan_kernel(const float* __restrict__ pre, float* __restrict__ out,
                                  int64_t B, int64_t T, int64_t H) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H) return;
    const int64_t b = idx / H;
    const int64_t j = idx % H;
    const float* p = pre + b * T * 2 * H;
    float* o = out + b * T * H + j;
    float h = 0.0f;
    for (int64_t t = 0; t < T; ++t) {
        const float a = 1.0f / (1.0f + expf(-p[t * 2 * H + j]));
        const float u = tanhf(p[t * 2 * H + H + j]);
        h = a * h + (1.0f - a) * u;
        o[t * H] = h;
    }
}

torch::Tensor gated_scan(torch::Tensor pre) {
    TORCH_CHECK(pre.is_cuda(), "gated_scan: expected a CUDA tensor");
    TORCH_CHECK(pre.scalar_type() == torch::kFloat32, "gated_scan: expected float32");
    TORCH_CHECK(pre.dim() == 3 && pre.size(2) % 2 == 0, "gated_scan: expected (B, T, 2H)");
    const c10::cuda::CUDAGuard guard(pre.device());
    pre = pre.contiguous();
    const int64_t B = pre.size(0), T = pre.size(1), H = pre.size(2) / 2;
    auto out = torch::empty({B, T, H}, pre.options());
    if (out.numel() == 0) return out;
    const int threads = 128;
    const int64_t blocks = (B * H + threads - 1) / threads;
    gated_scan_kernel<<<(unsigned)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        pre.data_ptr<float>(), out.data_ptr<float>(), B, T, H);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="evalfarm_builtin_cuda_gated_scan_v1",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["gated_scan"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    """Both input projections as one GEMM over all time steps (weights concatenated per call),
    then activations and the recurrence fused in one CUDA scan kernel: 2 + 1 launches
    instead of ~8 per time step."""

    def __init__(self, in_dim, hidden):
        super().__init__()
        self.hidden = hidden
        self.gate = nn.Linear(in_dim, hidden)
        self.cand = nn.Linear(in_dim, hidden)
        self.proj = nn.Linear(hidden, in_dim)

    def forward(self, x):
        w = torch.cat([self.gate.weight, self.cand.weight], dim=0)
        b = torch.cat([self.gate.bias, self.cand.bias], dim=0)
        pre = F.linear(x, w, b).float()
        return self.proj(_ext.gated_scan(pre).to(x.dtype))
