"""What counts as a CUDA fault: the one rule, for an error a worker caught and for a worker that died.

The rule. A candidate's failure is CUDA_FAULT (not RUNTIME_ERROR) when, on a CUDA device, its
error text names a fault of the device or of a CUDA library: a CUDA runtime error, a device-side
assert, an illegal memory access or instruction, a misaligned address, an unspecified launch
failure, a cuBLAS or cuDNN status. The text is the exception a worker caught (its type and
message: ``evalfarm.judge.worker``) or the last words on stderr of a worker that ended
(``evalfarm.judge.blame.receive_failure``). CUDA_FAULT matters beyond its name: the daemon's slot
health counts it against the GPU slot (evalfarm.server.slot_health), RUNTIME_ERROR it does not.
"""

from __future__ import annotations

MARKERS = ("CUDA error", "cuda runtime error", "device-side assert", "illegal memory access",
           "CUBLAS_STATUS", "CUDNN_STATUS", "cuDNN error", "unspecified launch failure",
           "misaligned address", "illegal instruction")


def is_cuda_fault(text: str, device_type: str = "cuda") -> bool:
    """True when ``text`` (an error's type and message, or a dead worker's last words) names a
    CUDA fault and the evaluation ran on a CUDA device."""
    return device_type == "cuda" and any(m in text for m in MARKERS)
