import torch
import torch.nn as nn

tokens = 8192
dim = 512
hidden = 1024
num_experts = 8
SIZE_PROFILES = {"small": {"tokens": 256, "dim": 64, "hidden": 128}}


class Model(nn.Module):
    """Top-1 mixture of small MLP experts, evaluated densely: every expert runs on every token,
    then each token keeps its router-chosen expert's output scaled by the router probability."""

    def __init__(self, dim, hidden, num_experts):
        super().__init__()
        self.router = nn.Linear(dim, num_experts)
        self.experts = nn.ModuleList(
            [
                nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))
                for _ in range(num_experts)
            ]
        )

    def forward(self, x):
        probs = torch.softmax(self.router(x), dim=-1)
        top_p, top_i = probs.max(dim=-1)
        all_out = torch.stack([expert(x) for expert in self.experts], dim=1)
        chosen = all_out[torch.arange(x.shape[0], device=x.device), top_i]
        return chosen * top_p.unsqueeze(-1)


def get_inputs():
    return [torch.randn(tokens, dim)]


def get_init_inputs():
    return [dim, hidden, num_experts]
