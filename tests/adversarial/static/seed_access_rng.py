# ruff: noqa
# expect: seed_access
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        state = torch.get_rng_state()
        torch.manual_seed(torch.initial_seed())
        return x
