"""Side streams: work enqueued on another stream can escape a timer that only waits on the
current one. Runtime: a device-wide synchronisation closes every timed call. Role: policy."""

from __future__ import annotations

from evalfarm.guards.rules.base import cpp_rule, name_rules

RULE_IDS = ("side_stream",)

NAMES = name_rules(
    "side_stream",
    [
        "torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream",
        "torch.cuda.set_stream", "torch.cuda.StreamContext", "torch.Stream",
        "torch.cuda.streams", "cupy.cuda.Stream", "cupy.cuda.stream", "cupy.cuda.ExternalStream",
        "cupy.cuda.Stream.null", "torch.xpu.Stream",
    ],
    "creates or switches to a side stream",
)

CPP = (
    cpp_rule("side_stream", r"\bcudaStreamCreate\w*|\bcuStreamCreate\w*",
             "creates a CUDA stream"),
    cpp_rule("side_stream", r"\bgetStreamFromPool\b|\bgetStreamFromExternal\b",
             "takes a side stream from the pool"),
    cpp_rule("side_stream",
             r"\bcudaStreamNonBlocking\b|\bcudaStreamPerThread\b|\bcudaStreamLegacy\b",
             "uses a non-default stream"),
    cpp_rule("side_stream",
             r"\bsetCurrentCUDAStream\b|\bCUDAStreamGuard\b|\bCUDAMultiStreamGuard\b",
             "switches the current CUDA stream"),
    cpp_rule("side_stream", r"\bcublasSetStream\w*|\bcudnnSetStream\b|\bcublasLtSetStream\w*",
             "binds a library handle to another stream"),
    cpp_rule("side_stream",
             r"\bcudaLaunchHostFunc\b|\bcuLaunchHostFunc\b|\bcudaStreamAddCallback\b",
             "enqueues host callbacks"),
)
