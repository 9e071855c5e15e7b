import torch
import torch.nn as nn

vocab_size = 50000
batch_size = 2048
seq_len = 128
embed_dim = 256
hidden = 512
num_classes = 64
SIZE_PROFILES = {
    "small": {"vocab_size": 5000, "batch_size": 64, "seq_len": 256, "embed_dim": 64, "hidden": 64}
}


class Model(nn.Module):
    """Bag-of-words text classifier: embed the tokens, average over the sequence,
    then a two-layer MLP to class logits."""

    def __init__(self, vocab_size, embed_dim, hidden, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.fc1 = nn.Linear(embed_dim, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, tokens):
        e = self.embedding(tokens)
        m = e.mean(dim=1)
        return self.fc2(torch.relu(self.fc1(m)))


def get_inputs():
    return [torch.randint(0, vocab_size, (batch_size, seq_len))]


def get_init_inputs():
    return [vocab_size, embed_dim, hidden, num_classes]
