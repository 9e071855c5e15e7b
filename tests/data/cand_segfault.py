import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
torch::Tensor crash(torch::Tensor x) {
  volatile float* p = nullptr;
  p[0] = 1.0f;  // segfault
  return x;
}
"""
mod = load_inline(name="evalfarm_test_segfault", cpp_sources=src, functions=["crash"])


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()

    def forward(self, x):
        return mod.crash(x)
