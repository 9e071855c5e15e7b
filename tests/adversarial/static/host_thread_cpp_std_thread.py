# ruff: noqa
# expect: host_thread
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
#include <thread>
torch::Tensor run(torch::Tensor a) {
    auto o = torch::empty_like(a);
    std::thread t([=]() mutable { o.copy_(a); });
    t.detach();
    return o;
}
"""
mod = load_inline(name="ht", cpp_sources=src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, a):
        return mod.run(a)
