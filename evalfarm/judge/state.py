"""The process-global settings the reference must run under, and a check that they hold.

Both judge and worker set the same clean state before any task or candidate code runs:
full-precision float32 matmuls and convolutions (no TF32), no cuDNN autotuning, a fixed
thread count. The worker snapshots that state and the identity of torch's public callables
after loading the candidate's module, and checks them before every reference call, so a
candidate cannot slow the reference (or speed itself up) by changing globals.
"""

from __future__ import annotations

from typing import Any

import torch


def set_clean_state(num_threads: int) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.enabled = True
    torch.set_float32_matmul_precision("highest")
    torch.set_num_threads(num_threads)
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(False)


def flags() -> dict[str, Any]:
    return {
        "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "cudnn.deterministic": torch.backends.cudnn.deterministic,
        "cudnn.enabled": torch.backends.cudnn.enabled,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "num_threads": torch.get_num_threads(),
        "default_dtype": str(torch.get_default_dtype()),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "grad_enabled_outside_calls": torch.is_grad_enabled(),
    }


def _namespaces() -> list[tuple[str, dict[str, Any]]]:
    import torch.nn.functional as F  # noqa: N812

    return [("torch", vars(torch)), ("torch.nn.functional", vars(F)), ("torch.Tensor", vars(torch.Tensor)),
            ("torch._C._nn", vars(torch._C._nn))]


class StateSnapshot:
    def __init__(self) -> None:
        self.flags = flags()
        self.bindings = {
            (ns, k): id(v) for ns, d in _namespaces() for k, v in list(d.items()) if callable(v)
        }

    def changes(self) -> list[str]:
        """What differs from the snapshot (empty when nothing does)."""
        now_flags = flags()
        out = [f"{k}: {v!r} -> {now_flags[k]!r}" for k, v in self.flags.items() if now_flags[k] != v]
        spaces = dict(_namespaces())
        for (ns, k), old in self.bindings.items():
            v = spaces[ns].get(k, _MISSING)
            if v is _MISSING:
                out.append(f"{ns}.{k} was deleted")
            elif id(v) != old:
                out.append(f"{ns}.{k} was rebound")
        return out


_MISSING = object()
