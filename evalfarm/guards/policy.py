"""Which optional behaviours a candidate may use. Rules whose role is ``blocks`` (see
:mod:`evalfarm.guards.rule_roles`) reject under every policy; ``testifies`` rules never do.

Named policies (``GuardPolicy.from_name``):

* ``honest`` (the default, ``DEFAULT_POLICY``): every optional behaviour is allowed -- reduced
  precision (tolerance decides whether it is precise enough), side streams, host threads, CUDA
  graphs, Triton, PyTorch ops. Only the ``blocks`` rules reject: tampering with the harness in
  the worker's process, child processes/exec/kill, network access, destructive filesystem
  operations and symbol interposition. Everything else is reported as evidence.
* ``paper``: the rules of the KernelBench paper. Reduced precision (unless the reference uses
  it), side streams, host threads and CUDA graphs are forbidden; Triton and PyTorch's own ops
  are allowed (the reward then simply measures whatever speedup they give).
* ``strict``: ``paper``, and ``forward`` must do its work in custom kernels: only
  shape/view/allocation helpers of PyTorch may be called there.
* ``permissive``: an alias of ``honest``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from evalfarm.guards.rule_roles import BLOCKS, POLICY, role_of

__all__ = ["DEFAULT_POLICY", "GuardPolicy"]

DEFAULT_POLICY = "honest"


@dataclass(frozen=True)
class GuardPolicy:
    """The default instance is the ``honest`` policy."""

    allow_torch_ops: bool = True
    """May ModelNew.forward call PyTorch's own compute ops (torch.matmul, F.conv2d, x.relu() ...)?"""
    allow_reduced_precision: bool = True
    """.half()/.bfloat16()/autocast/float16 dtypes/TF32 (precision the reference also uses is
    always allowed, see ``check_candidate_source(reference_source=...)``)."""
    allow_streams: bool = True
    """torch.cuda.Stream, cudaStreamCreate*, getStreamFromPool, cublasSetStream ..."""
    allow_threads: bool = True
    """threading, concurrent.futures, multiprocessing, std::thread, pthread_create ...
    (OpenMP is always allowed: its parallel regions join before the function returns)."""
    allow_cuda_graphs: bool = True
    """torch.cuda.CUDAGraph, torch.cuda.graph, torch.compile(mode="reduce-overhead"), cudaGraph*."""
    allow_triton: bool = True
    """import triton / @triton.jit kernels."""

    NAMES: ClassVar[tuple[str, ...]] = ("honest", "paper", "strict", "permissive")

    @classmethod
    def from_name(cls, name: str) -> GuardPolicy:
        """Return the named policy: "honest" (default), "paper", "strict" or "permissive"."""
        key = name.strip().lower()
        if key in ("honest", "permissive", "default"):
            return cls()
        paper = cls(allow_reduced_precision=False, allow_streams=False, allow_threads=False,
                    allow_cuda_graphs=False)
        if key == "paper":
            return paper
        if key == "strict":
            return cls(allow_torch_ops=False, allow_reduced_precision=False, allow_streams=False,
                       allow_threads=False, allow_cuda_graphs=False)
        raise ValueError(
            f"unknown guard policy {name!r}; expected one of {', '.join(cls.NAMES)}"
        )

    def allows(self, flag: str | None) -> bool:
        """True if the optional behaviour named by ``flag`` (a field name) is allowed.

        ``None`` names no optional behaviour, which no policy allows.
        """
        if flag is None:
            return False
        if flag not in {f.name for f in fields(self)}:
            raise KeyError(f"GuardPolicy has no flag {flag!r}")
        return bool(getattr(self, flag))

    def blocks(self, guard: str) -> bool:
        """Whether a finding of rule ``guard`` alone decides HACK_DETECTED under this policy."""
        role = role_of(guard)
        if role.role == BLOCKS:
            return True
        if role.role == POLICY:
            return not self.allows(role.flag)
        return False
