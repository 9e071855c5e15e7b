# ruff: noqa
# A global module forward hook, installed at import, fires on every nn.Module's forward in the
# process. If the reference ran in the candidate's process, the hook would see the reference's
# output for the same round and the candidate could return it without computing anything
# (paid 3.57x when both ran in one process). The reference runs in its own worker: the hook
# never sees it, and the candidate computes honestly.
import torch
import torch.nn as nn

_last = {}


def _steal(module, args, output):
    if type(module).__name__ == "Model" and isinstance(output, torch.Tensor):
        _last["x"], _last["y"] = args[0], output


torch.nn.modules.module.register_module_forward_hook(_steal)


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x):
        if "y" in _last and torch.equal(_last["x"], x):
            return _last["y"].clone()
        return torch.relu(x) * self.scale + self.bias
