# ruff: noqa
# task: L3/5
# style: plain_rewrite
# device: any
# expect: OK
# speedup: >=1.1
# why: embedding followed by a mean over the sequence is F.embedding_bag(mode="mean"), which never materialises the (B, T, E) tensor
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, vocab_size, embed_dim, hidden, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.fc1 = nn.Linear(embed_dim, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, tokens):
        m = F.embedding_bag(tokens, self.embedding.weight, mode="mean")
        return self.fc2(torch.relu_(self.fc1(m)))
