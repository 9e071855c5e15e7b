# ruff: noqa
# What TF32 does to an fp32 matmul, emulated on any device: both operands' mantissas rounded to
# 10 bits (round to nearest even) before a float32 product. On an H100, allow_tf32 paid 6.02x on
# KernelBench's square matmul. On uniform [0, 1) inputs the result stays within the strict 1e-4
# relative L2 tolerance (about 2e-5 at 256 x 256), while its error against the exact product is
# about 100x the float32 reference's: the precision gate refuses it; precision="tolerance" and the
# paper policy (tolerance only) do not.
import torch
import torch.nn as nn


def _tf32(x):
    bits = x.contiguous().view(torch.int32)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF
    return bits.view(torch.float32)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(_tf32(A), _tf32(B))
