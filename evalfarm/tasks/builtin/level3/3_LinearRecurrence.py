import torch
import torch.nn as nn

batch_size = 64
seq_len = 256
in_dim = 256
hidden = 512
SIZE_PROFILES = {"small": {"batch_size": 8, "seq_len": 48, "in_dim": 32, "hidden": 64}}


class Model(nn.Module):
    """A gated linear recurrent cell (minGRU-style, no hidden-to-hidden matmul) unrolled over time:
    a_t = sigmoid(Wa x_t), u_t = tanh(Wu x_t), h_t = a_t * h_{t-1} + (1 - a_t) * u_t, h_0 = 0,
    followed by an output projection of every h_t. Input (B, T, in_dim), output (B, T, in_dim)."""

    def __init__(self, in_dim, hidden):
        super().__init__()
        self.hidden = hidden
        self.gate = nn.Linear(in_dim, hidden)
        self.cand = nn.Linear(in_dim, hidden)
        self.proj = nn.Linear(hidden, in_dim)

    def forward(self, x):
        b, t, _ = x.shape
        h = torch.zeros(b, self.hidden, dtype=x.dtype, device=x.device)
        outs = []
        for i in range(t):
            a = torch.sigmoid(self.gate(x[:, i]))
            u = torch.tanh(self.cand(x[:, i]))
            h = a * h + (1.0 - a) * u
            outs.append(h)
        return self.proj(torch.stack(outs, dim=1))


def get_inputs():
    return [torch.randn(batch_size, seq_len, in_dim)]


def get_init_inputs():
    return [in_dim, hidden]
