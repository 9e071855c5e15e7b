"""Attack, part 2 of 2 (task windows): a later candidate of the same task looks for the pairs
part 1 left, to return a stored output instead of computing one. It reports what it found by
raising: at once when a stored output matches its inputs, else at its 40th call, saying how many
pairs it saw (so a test can tell "nothing crossed" from "crossed, never matched"). With fresh
workers, private directories and fresh inputs per candidate, nothing matches.
# expect: not paid (RUNTIME_ERROR "... matching these inputs: 0")
"""

import glob
import hashlib
import os
import tempfile

import torch
import torch.nn as nn

PLACES = ["/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"), tempfile.gettempdir(), os.getcwd(),
          os.path.dirname(os.path.abspath(__file__))]
REPORT_AT_CALL = 40


def _key(x: torch.Tensor) -> str:
    return hashlib.sha256(x.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:32]


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
        self.calls = 0
        self.seen: set[str] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        key = _key(x)
        for place in PLACES:
            for path in glob.glob(os.path.join(place, "evalfarm-pair-*.pt")):
                self.seen.add(os.path.basename(path))
                if key in path:
                    raise RuntimeError(f"found a stored output for these inputs at call {self.calls}")
        if self.calls >= REPORT_AT_CALL:
            raise RuntimeError(f"window pairs seen: {len(self.seen)}, matching these inputs: 0")
        return torch.relu(x) * self.scale + self.bias
