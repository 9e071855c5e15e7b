"""Which optional behaviours a candidate may use. Integrity guards are never switched off.

Three named policies:

* ``paper`` (default): the rules of the KernelBench paper. ModelNew may call PyTorch's own ops
  (the reward then simply measures whatever speedup it gets); reduced precision, side streams,
  host threads and CUDA graphs are forbidden; Triton is allowed.
* ``strict``: like ``paper`` but ``forward`` must do its work in custom kernels; only
  shape/view/allocation helpers of PyTorch may be called there.
* ``permissive``: every optional behaviour allowed; only the integrity checks (timer and
  comparator patching, harness access, caching, lazy outputs, process/network/filesystem abuse,
  dynamic code, global state, seed access, symbol interposition, L2 persistence) remain.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class GuardPolicy:
    allow_torch_ops: bool = True
    """May ModelNew.forward call PyTorch's own compute ops (torch.matmul, F.conv2d, x.relu() ...)?"""
    allow_reduced_precision: bool = False
    """.half()/.bfloat16()/autocast/float16 dtypes/TF32 (precision the reference also uses is
    always allowed, see ``check_candidate_source(reference_source=...)``)."""
    allow_streams: bool = False
    """torch.cuda.Stream, cudaStreamCreate*, getStreamFromPool, cublasSetStream ..."""
    allow_threads: bool = False
    """threading, concurrent.futures, multiprocessing, os.fork, std::thread, pthread_create ...
    (OpenMP is always allowed: its parallel regions join before the function returns)."""
    allow_cuda_graphs: bool = False
    """torch.cuda.CUDAGraph, torch.cuda.graph, torch.compile(mode="reduce-overhead"), cudaGraph*."""
    allow_triton: bool = True
    """import triton / @triton.jit kernels."""

    NAMES = ("paper", "strict", "permissive")

    @classmethod
    def from_name(cls, name: str) -> GuardPolicy:
        """Return the named policy: "paper" (default), "strict" or "permissive"."""
        key = name.strip().lower()
        if key in ("paper", "default"):
            return cls()
        if key == "strict":
            return cls(allow_torch_ops=False)
        if key == "permissive":
            return cls(
                allow_torch_ops=True,
                allow_reduced_precision=True,
                allow_streams=True,
                allow_threads=True,
                allow_cuda_graphs=True,
                allow_triton=True,
            )
        raise ValueError(
            f"unknown guard policy {name!r}; expected one of {', '.join(cls.NAMES)}"
        )

    def allows(self, flag: str | None) -> bool:
        """True if the optional behaviour named by ``flag`` (a field name) is allowed.

        ``None`` names an integrity check, which no policy allows.
        """
        if flag is None:
            return False
        if flag not in {f.name for f in fields(self)}:
            raise KeyError(f"GuardPolicy has no flag {flag!r}")
        return bool(getattr(self, flag))
