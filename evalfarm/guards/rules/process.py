"""Process control.

``process_abuse`` (blocks): child processes, exec, fork, pty, signals sent to other processes --
unsafe to run (they act outside the worker, on the judge or the host) before any runtime check
can see them. ``process_exit`` (testifies): ending or reconfiguring the worker itself (exit,
signal handlers, atexit, faulthandler, resource limits, teardown hooks); the runtime turns an
early exit or a lost worker into RUNTIME_ERROR.
"""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import cpp_rule, name_rules

RULE_IDS = ("process_abuse", "process_exit")

NAMES = name_rules(
    "process_abuse",
    [
        "subprocess", "_posixsubprocess", "os.system", "os.popen", "os.execv", "os.execve",
        "os.execl", "os.execle", "os.execlp", "os.execlpe", "os.execvp", "os.execvpe",
        "os.spawnl", "os.spawnle", "os.spawnlp", "os.spawnlpe", "os.spawnv", "os.spawnve",
        "os.spawnvp", "os.spawnvpe", "os.posix_spawn", "os.posix_spawnp", "os.kill",
        "os.killpg", "os.fork", "os.forkpty", "pty", "signal.pthread_kill", "os.pidfd_open",
    ],
    "starts, replaces or signals processes",
)
NAMES |= name_rules(
    "process_exit",
    [
        "os._exit", "os.abort", "os.setsid", "os.setpgrp", "os.nice", "sys.exit", "exit",
        "quit", "signal", "resource", "atexit", "faulthandler", "os.dup", "os.dup2",
        "os.close", "os.closerange", "os.write", "os.pipe", "os.chdir", "pdb", "code",
    ],
    "ends or reconfigures the worker process (exit, signals, fds, limits)",
)

CPP = (
    cpp_rule("process_abuse", r"(?<![\w.>:])(?:std\s*::\s*)?(?:system|popen|fork|vfork|"
             r"execv\w*|execl\w*|kill|ptrace|posix_spawnp?)\s*\(",
             "starts, replaces or signals processes from C++"),
    cpp_rule("process_exit", r"(?<![\w.>:])(?:std\s*::\s*)?(?:_exit|quick_exit|_Exit|raise|"
             r"sigaction|signal|prctl|setrlimit)\s*\(",
             "ends or reconfigures the worker process from C++"),
    cpp_rule("process_exit", r"\bcudaDeviceReset\b|\bcuCtxDestroy\w*|\bcuDevicePrimaryCtxReset\w*",
             "resets or destroys the worker's CUDA context"),
)


def on_function(eng: Any, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    if node.name == "__del__":
        eng.add("process_exit", node, "defines __del__, code that runs at teardown")


def on_raise(eng: Any, node: ast.Raise) -> None:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    name = eng.index.resolve(exc) if exc is not None else None
    if name in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
        eng.add("process_exit", node, f"raises {name}, which ends the worker process")
