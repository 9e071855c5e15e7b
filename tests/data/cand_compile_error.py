import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = "torch::Tensor f(torch::Tensor x) { return x.relu() }  // missing semicolon"
mod = load_inline(name="evalfarm_test_compile_error", cpp_sources=src, functions=["f"])


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()

    def forward(self, x):
        return mod.f(x)
