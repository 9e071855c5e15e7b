# ruff: noqa
# task: L2/5
# style: cuda_inline, templated_source, data_ptr_alignment, version_refresh
# device: cuda
# expect: OK
# speedup: >=10
# why: the GEMM-then-sum folds to x . w_sum (w_sum = column sums of W times s/2, rebuilt when the weight's _version changes); a warp per row, float4 loads when x.data_ptr() is 16-byte aligned and the row length a multiple of 4, else the scalar kernel
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

WARPS = 8

_TEMPLATE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

template <bool VEC>
__global__ void row_dot(const float* __restrict__ x, const float* __restrict__ w, float bias, float* __restrict__ y,
                        int64_t rows, int64_t K) {{
    const int64_t row = (int64_t)blockIdx.x * {warps} + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* xr = x + row * K;
    float acc = 0.0f;
    if (VEC) {{
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        for (int64_t i = lane; i < K / 4; i += 32) {{
            const float4 a = x4[i], b = w4[i];
            acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
        }}
    }} else {{
        for (int64_t i = lane; i < K; i += 32) acc += xr[i] * w[i];
    }}
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
    if (lane == 0) y[row] = acc + bias;
}}

torch::Tensor folded_row_dot(torch::Tensor x, torch::Tensor w, double bias, bool vec) {{
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && w.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous float32 CUDA tensors expected");
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0), K = x.size(1);
    auto y = torch::empty({{rows, 1}}, x.options());
    if (rows == 0) return y;
    const int64_t blocks = (rows + {warps} - 1) / {warps};
    auto stream = at::cuda::getCurrentCUDAStream();
    if (vec) row_dot<true><<<blocks, {warps} * 32, 0, stream>>>(x.data_ptr<float>(), w.data_ptr<float>(), (float)bias, y.data_ptr<float>(), rows, K);
    else row_dot<false><<<blocks, {warps} * 32, 0, stream>>>(x.data_ptr<float>(), w.data_ptr<float>(), (float)bias, y.data_ptr<float>(), rows, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}}
"""

_ext = load_inline(
    name=f"honest_cuda_folded_row_dot_w{WARPS}",
    cpp_sources="torch::Tensor folded_row_dot(torch::Tensor x, torch::Tensor w, double bias, bool vec);",
    cuda_sources=_TEMPLATE.format(warps=WARPS),
    functions=["folded_row_dot"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor
        self._key = None

    def _folded(self):
        w, b = self.linear.weight, self.linear.bias
        key = (w.data_ptr(), w._version, b.data_ptr(), b._version)
        if key != self._key:
            with torch.no_grad():
                k = self.scaling_factor / 2.0
                self._w = (w.sum(dim=0) * k).contiguous()
                self._b = float(b.sum()) * k
            self._key = key
        return self._w, self._b

    def forward(self, x):
        w, b = self._folded()
        xc = x.contiguous()
        vec = xc.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0 and xc.shape[1] % 4 == 0
        return _ext.folded_row_dot(xc, w, b, vec)
