# ruff: noqa
# Order-robust stale-memory attack on relu(x @ w). When the reference ran first in a round, its
# x @ w temporary was freed just before this call, and a fresh torch.empty of the same size is
# likely to land on that block, which still holds x @ w for the same input values. The candidate
# checks a few entries against dot products it computes itself and, only when they match,
# finishes with an in-place relu (no matmul at all); otherwise it computes honestly. Every output
# is correct, so every audit passes: only poisoning free memory between calls takes the gain away.
# COUNT_PATH is substituted by the test: after every call "<reused> <calls>" is written there.
import os

import torch
import torch.nn as nn

COUNT_PATH = ""
PROBES = ((0, 0), (1, 7), (17, 3), (-1, -1), (-2, 5))


class ModelNew(nn.Module):
    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(k, n) / k**0.5)  # same seed as the reference: same w
        self.calls = 0
        self.reused = 0
        self.fd = os.open(COUNT_PATH, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if COUNT_PATH else -1

    def _holds_product(self, x: torch.Tensor, y: torch.Tensor) -> bool:
        for i, j in PROBES:
            want = torch.dot(x[i], self.w[:, j]).item()
            got = y[i, j].item()
            if not abs(got - want) <= 1e-3 * (1.0 + abs(want)):  # NaN poison fails this too
                return False
        return True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = torch.empty(x.shape[0], self.w.shape[1], device=x.device, dtype=x.dtype)
        if self._holds_product(x, y):
            self.reused += 1
            out = torch.relu_(y)
        else:
            out = torch.relu(x @ self.w)
        if self.fd >= 0:
            os.pwrite(self.fd, f"{self.reused} {self.calls}\n".encode(), 0)
        return out
