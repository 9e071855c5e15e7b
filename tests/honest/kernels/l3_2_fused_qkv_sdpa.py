# ruff: noqa
# task: L3/2
# style: plain_rewrite, pretransformed_weights
# device: any
# expect: OK
# speedup: >=1.2
# why: the three projections are one GEMM with weights concatenated once in __init__ (registered buffers, so they follow .to(device)), and the masked softmax attention is F.scaled_dot_product_attention(is_causal=True)
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)
        with torch.no_grad():
            w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight], dim=0)
            b = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias], dim=0)
        self.register_buffer("_wqkv_t", w.t().contiguous(), persistent=False)
        self.register_buffer("_bqkv", b.clone(), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        qkv = torch.addmm(self._bqkv, x.reshape(b * t, d), self._wqkv_t)
        qkv = qkv.view(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, d)
        return self.out_proj(y)
