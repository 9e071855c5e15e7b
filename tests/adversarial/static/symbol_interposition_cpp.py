# ruff: noqa
# expect: symbol_interposition
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
extern "C" int cudaEventElapsedTime(float* ms, void* a, void* b) { *ms = 0.001f; return 0; }
torch::Tensor run(torch::Tensor a) { return a; }
"""
mod = load_inline(name="si", cpp_sources=src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return mod.run(x)
