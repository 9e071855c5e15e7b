# ruff: noqa
# expect: side_stream
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

PRE = "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n"
BODY = """
torch::Tensor run(torch::Tensor x) {
    auto s = at::cuda::getStreamFrom""" + "Pool();" + """
    auto out = torch::empty_like(x);
    return out;
}
"""
cuda_src = PRE + BODY
mod = load_inline(name="ss", cpp_sources="torch::Tensor run(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return mod.run(x)
