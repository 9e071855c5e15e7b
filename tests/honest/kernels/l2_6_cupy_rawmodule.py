# ruff: noqa
# task: L2/6
# style: cupy_rawmodule, algebraic_shortcut
# device: cuda
# expect: OK
# speedup: >=1.4
# why: the chain reduces to tanh(relu(x)); a CuPy RawModule kernel computes it in one pass on PyTorch's current stream over zero-copy DLPack views of the input and a fresh output (measured on an H100: 1.81x and 1.58x in two sweeps; the reference's three elementwise passes are already near the bandwidth bound, and CuPy's launch path adds host time per call)
import cupy
import torch
import torch.nn as nn

_CODE = r"""
extern "C" __global__ void relu_tanh(const float* __restrict__ x, float* __restrict__ y, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = tanhf(fmaxf(x[i], 0.0f));
    }
}
"""

_module = cupy.RawModule(code=_CODE)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._kernel = None

    def forward(self, x):
        if self._kernel is None:
            self._kernel = _module.get_function("relu_tanh")
        xc = x.contiguous()
        y = torch.empty_like(xc)
        n = xc.numel()
        threads = 256
        blocks = min((n + threads - 1) // threads, 65535)
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(x.device).cuda_stream)
        with cupy.cuda.Device(x.device.index), stream:
            self._kernel((blocks,), (threads,), (cupy.from_dlpack(xc), cupy.from_dlpack(y), cupy.int64(n)))
        return y
