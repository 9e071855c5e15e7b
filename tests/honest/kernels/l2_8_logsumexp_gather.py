# ruff: noqa
# task: L2/8
# style: algebraic_shortcut
# device: any
# expect: OK
# speedup: >=0.9
# why: the one-hot row picks a single log-probability: loss_b = logsumexp(z_b) - z_b[t_b]; no (B, C) one-hot or log_softmax matrix
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        lse = torch.logsumexp(logits, dim=1)
        picked = logits.gather(1, targets.unsqueeze(1)).squeeze(1)
        return (lse - picked).mean()
