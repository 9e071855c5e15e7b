"""Host threads: work that can outlive the timed call. Runtime: the candidate's process is
stopped while the reference is timed, and every timed call ends with a device-wide sync; fresh
inputs each call make background work useless. Role: policy."""

from __future__ import annotations

from evalfarm.guards.rules.base import cpp_rule, name_rules

RULE_IDS = ("host_thread",)

NAMES = name_rules(
    "host_thread",
    [
        "threading", "_thread", "concurrent", "concurrent.futures", "multiprocessing",
        "torch.multiprocessing", "asyncio", "os.register_at_fork", "torch.jit.fork",
        "torch.jit._fork", "torch.futures", "queue", "sched", "joblib",
    ],
    "runs work on another host thread/process",
)

CPP = (
    cpp_rule("host_thread", r"\bstd\s*::\s*j?thread\b|\bboost\s*::\s*thread\b",
             "starts a host thread (std::thread)"),
    cpp_rule("host_thread", r"\bstd\s*::\s*async\b|\bstd\s*::\s*launch\s*::\s*async\b",
             "std::async runs work on another thread"),
    cpp_rule("host_thread", r"\bpthread_create\b|\bthrd_create\b|\bclone\s*\(",
             "starts a host thread"),
    cpp_rule("host_thread", r"\.\s*detach\s*\(\s*\)",
             "detach() lets a thread run past the end of the call"),
)
