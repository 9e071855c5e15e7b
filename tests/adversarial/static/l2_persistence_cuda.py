# ruff: noqa
# expect: l2_persistence
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
torch::Tensor run(torch::Tensor a) {
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20);
    return a;
}
"""
mod = load_inline(name="l2", cpp_sources="", cuda_sources=src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return mod.run(x)
