"""A TorchDispatchMode for the judge's own bookkeeping (counting FLOPs, watching dtypes).

PyTorch wraps every mode's ``__torch_dispatch__`` in ``torch._disable_dynamo``, whose first call
imports ``torch._dynamo``: 1.2 s of a development CPU, seconds more on the GPU hosts, paid in the
judge's set-up of every evaluation. The judge never compiles what runs under these modes, so
``JudgeDispatchMode`` opts out of the wrapping (``_should_skip_dynamo``); where a PyTorch version
has no such hook, the mode still works, only its first use is slower.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class JudgeDispatchMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False
