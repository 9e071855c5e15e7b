# ruff: noqa
# task: L3/7
# style: cuda_inline, mixed_precision, algebraic_shortcut
# device: cuda
# expect: OK
# speedup: >=3
# why: A + I holds only 0, 1 and 2, exact in half precision, so it is stored as half (half the bytes) and read with __half2float; products accumulate in float32; the normalisation is a row scaling, so no N x N x N product is formed
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_fp16.h>

#define BM 64
#define BN 64
#define BK 16

// Y[i, f] = s[i] * sum_k A[i, k] * X[k, f]; A (N, K) half, X (K, F) float, fp32 accumulation.
__global__ void half_a_matmul(const __half* __restrict__ A, const float* __restrict__ X, const float* __restrict__ s,
                              float* __restrict__ Y, int N, int K, int F) {
    __shared__ float As[BK][BM];
    __shared__ float Xs[BK][BN];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int e = threadIdx.x; e < BM * BK; e += 256) {
            const int r = e / BK, c = e % BK;
            const int gr = row0 + r, gc = k0 + c;
            As[c][r] = (gr < N && gc < K) ? __half2float(A[(int64_t)gr * K + gc]) : 0.0f;
        }
        for (int e = threadIdx.x; e < BK * BN; e += 256) {
            const int r = e / BN, c = e % BN;
            const int gr = k0 + r, gc = col0 + c;
            Xs[r][c] = (gr < K && gc < F) ? X[(int64_t)gr * F + gc] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[4], b[4];
            #pragma unroll
            for (int i = 0; i < 4; ++i) { a[i] = As[k][ty * 4 + i]; b[i] = Xs[k][tx * 4 + i]; }
            #pragma unroll
            for (int i = 0; i < 4; ++i)
                #pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = row0 + ty * 4 + i;
        if (r >= N) continue;
        const float si = s[r];
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = col0 + tx * 4 + j;
            if (c < F) Y[(int64_t)r * F + c] = si * acc[i][j];
        }
    }
}

torch::Tensor scaled_half_matmul(torch::Tensor a_half, torch::Tensor x, torch::Tensor s) {
    TORCH_CHECK(a_half.scalar_type() == torch::kHalf && x.scalar_type() == torch::kFloat32, "half A, float32 X expected");
    const c10::cuda::CUDAGuard guard(x.device());
    a_half = a_half.contiguous(); x = x.contiguous(); s = s.contiguous();
    const int N = a_half.size(0), K = a_half.size(1), F = x.size(1);
    auto y = torch::empty({N, F}, x.options());
    dim3 grid((F + BN - 1) / BN, (N + BM - 1) / BM);
    half_a_matmul<<<grid, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const __half*>(a_half.data_ptr<at::Half>()), x.data_ptr<float>(), s.data_ptr<float>(),
        y.data_ptr<float>(), N, K, F);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="honest_cuda_half_adjacency_matmul",
    cpp_sources="torch::Tensor scaled_half_matmul(torch::Tensor a_half, torch::Tensor x, torch::Tensor s);",
    cuda_sources=_CUDA,
    functions=["scaled_half_matmul"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.lin1 = nn.Linear(in_features, hidden)
        self.lin2 = nn.Linear(hidden, out_features)

    def forward(self, x, adj):
        a = adj.to(torch.float16)  # 0/1 entries: exact
        a.diagonal().add_(1.0)     # 1 or 2 on the diagonal: exact
        d = (adj.sum(dim=1) + 1.0).rsqrt_()
        h = _ext.scaled_half_matmul(a, d.unsqueeze(1) * self.lin1(x), d).relu_()
        return _ext.scaled_half_matmul(a, d.unsqueeze(1) * self.lin2(h), d)
