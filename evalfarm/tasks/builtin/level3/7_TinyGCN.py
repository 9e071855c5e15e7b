import torch
import torch.nn as nn

num_nodes = 4096
in_features = 512
hidden = 256
out_features = 64
edge_prob = 0.01
SIZE_PROFILES = {
    "small": {"num_nodes": 256, "in_features": 64, "hidden": 64, "out_features": 16, "edge_prob": 0.05}
}


class Model(nn.Module):
    """Two-layer graph convolutional network on a dense directed adjacency matrix:
    A_hat = D^-1/2 (A + I) D^-1/2 with D the row degrees of A + I, built with diagonal matrices;
    out = A_hat @ lin2(relu(A_hat @ lin1(x)))."""

    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.lin1 = nn.Linear(in_features, hidden)
        self.lin2 = nn.Linear(hidden, out_features)

    def forward(self, x, adj):
        n = adj.shape[0]
        a = adj + torch.eye(n, dtype=adj.dtype, device=adj.device)
        d_inv_sqrt = torch.diag(a.sum(dim=1).pow(-0.5))
        a_hat = d_inv_sqrt @ a @ d_inv_sqrt
        h = torch.relu(a_hat @ self.lin1(x))
        return a_hat @ self.lin2(h)


def get_inputs():
    return [torch.randn(num_nodes, in_features), (torch.rand(num_nodes, num_nodes) < edge_prob).float()]


def get_init_inputs():
    return [in_features, hidden, out_features]
