import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """F.layer_norm and the built-in tanh GELU replace the hand-written elementwise chains; the
    residual is added in place to the second GEMM's output."""

    def __init__(self, dim, hidden, eps):
        super().__init__()
        self.eps = eps
        self.ln_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.ln_bias = nn.Parameter(0.1 * torch.randn(dim))
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        h = F.layer_norm(x, (x.shape[-1],), self.ln_weight, self.ln_bias, self.eps)
        h = F.gelu(self.fc1(h), approximate="tanh")
        return self.fc2(h).add_(x)
