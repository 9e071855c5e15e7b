"""Static guards on a candidate's Python source (its AST) and on the C++/CUDA strings it compiles.

The entry point is :func:`check_candidate_source`. It never executes the candidate. Names are
resolved through imports and simple aliases (``import torch as t``, ``from torch.cuda import
Stream as S``, ``S = torch.cuda.Stream``, ``getattr(torch.cuda, "Stream")``,
``__import__("threading")``, ``importlib.import_module("threading")``, ``sys.modules["torch"]``)
before they are matched, so the checks see *what* is used rather than how it is spelled. What
cannot be resolved statically (``exec``, ``eval``, ``getattr`` with a computed name on a module,
``pickle.loads`` ...) is itself flagged as ``dynamic_code``.

Every :class:`Finding` names a stable guard id and a reason that starts with ``line N:``.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from evalfarm.guards.policy import GuardPolicy

__all__ = [
    "CandidateSyntaxError",
    "Finding",
    "check_candidate_source",
    "check_cpp_source",
    "reference_precisions",
]


@dataclass(frozen=True)
class Finding:
    """One fired guard: a stable short id, a human-readable reason and (if known) a line."""

    guard: str
    reason: str
    line: int | None = None


class CandidateSyntaxError(ValueError):
    """The candidate is not valid Python. The core should report COMPILE_ERROR, not a hack."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


# --------------------------------------------------------------------------------------------
# Rule tables for resolved Python names.  A rule matches a resolved dotted name if the name
# equals the rule's prefix or starts with ``prefix + "."``.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    guard: str
    reason: str
    flag: str | None = None  # GuardPolicy field that allows it; None = integrity check
    hot_only: bool = False  # only inside forward (and what forward calls) or at module level
    precision: str | None = None  # reduced-precision family, for the reference exemption


def _rules(guard: str, names: Iterable[str], reason: str, **kw: object) -> dict[str, _Rule]:
    return {n: _Rule(guard, reason, **kw) for n in names}  # type: ignore[arg-type]


_NAME_RULES: dict[str, _Rule] = {}
_NAME_RULES |= _rules(
    "side_stream",
    [
        "torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream",
        "torch.cuda.set_stream", "torch.cuda.StreamContext", "torch.Stream",
        "torch.cuda.streams", "cupy.cuda.Stream", "cupy.cuda.stream", "cupy.cuda.ExternalStream",
        "cupy.cuda.Stream.null", "torch.xpu.Stream",
    ],
    "creates or switches to a side stream; work on it escapes the timer",
    flag="allow_streams",
)
_NAME_RULES |= _rules(
    "host_thread",
    [
        "threading", "_thread", "concurrent", "concurrent.futures", "multiprocessing",
        "torch.multiprocessing", "asyncio", "os.fork", "os.forkpty", "os.posix_spawn",
        "os.posix_spawnp", "os.register_at_fork", "torch.jit.fork", "torch.jit._fork",
        "torch.futures", "queue", "sched", "_posixsubprocess", "joblib",
    ],
    "runs work on another host thread/process; it can outlive the timed call",
    flag="allow_threads",
)
_NAME_RULES |= _rules(
    "process_abuse",
    [
        "subprocess", "os.system", "os.popen", "os.execv", "os.execve", "os.execl", "os.execle",
        "os.execlp", "os.execlpe", "os.execvp", "os.execvpe", "os.spawnl", "os.spawnle",
        "os.spawnlp", "os.spawnlpe", "os.spawnv", "os.spawnve", "os.spawnvp", "os.spawnvpe",
        "os._exit", "os.abort", "os.kill", "os.killpg", "os.setsid", "os.setpgrp", "os.nice",
        "sys.exit", "exit", "quit", "signal", "resource", "atexit", "pty", "faulthandler",
        "os.dup", "os.dup2", "os.close", "os.closerange", "os.write", "os.pipe", "os.chdir",
        "pdb", "code",
    ],
    "controls the process (exit, signals, child processes, fds, limits) instead of computing",
)
_NAME_RULES |= _rules(
    "network",
    [
        "socket", "urllib", "urllib3", "http", "requests", "httpx", "aiohttp", "ftplib",
        "smtplib", "telnetlib", "xmlrpc", "websocket", "websockets", "paramiko", "grpc", "zmq",
        "ssl", "socketserver", "poplib", "imaplib",
    ],
    "network access",
)
_NAME_RULES |= _rules(
    "filesystem",
    [
        "shutil", "tempfile", "os.remove", "os.unlink", "os.rename", "os.renames", "os.replace",
        "os.makedirs", "os.mkdir", "os.rmdir", "os.removedirs", "os.chmod", "os.chown",
        "os.symlink", "os.link", "os.truncate", "os.ftruncate", "os.mkfifo", "os.mknod",
        "os.open", "os.memfd_create", "torch.save", "torch.load", "numpy.save", "numpy.savez",
        "numpy.savez_compressed", "numpy.load", "numpy.fromfile", "numpy.memmap", "mmap",
        "shelve", "dbm", "sqlite3", "io.FileIO", "fcntl",
    ],
    "touches the filesystem (writes, or loads stored data); a kernel has no reason to",
)
_NAME_RULES |= _rules(
    "cuda_graph",
    [
        "torch.cuda.CUDAGraph", "torch.cuda.graph", "torch.cuda.graphs",
        "torch.cuda.make_graphed_callables", "torch.cuda.graph_pool_handle",
        "cupy.cuda.Graph", "torch._inductor.cudagraph_trees",
    ],
    "uses CUDA graphs (replays recorded work, hides launch cost the reference pays)",
    flag="allow_cuda_graphs",
)
_NAME_RULES |= _rules(
    "harness_access",
    [
        "ctypes", "_ctypes", "cffi", "sys.settrace", "sys.setprofile", "sys._getframe",
        "sys._current_frames", "sys.modules", "sys.meta_path", "sys.path_hooks",
        "sys.addaudithook", "sys.setrecursionlimit", "sys._current_exceptions",
        "sys.__stdout__", "sys.__stderr__", "threading.settrace", "threading.setprofile",
        "inspect.currentframe", "inspect.stack", "inspect.getouterframes", "inspect.trace",
        "inspect.getframeinfo", "inspect.getmembers", "gc.get_objects", "gc.get_referrers",
        "gc.get_referents", "gc.callbacks", "gc.disable", "gc.freeze", "builtins",
        "__builtins__", "__main__", "weakref", "tracemalloc", "importlib.reload",
        "evalfarm", "pytest", "unittest.mock", "torch.testing._internal",
    ],
    "reaches into the harness / interpreter internals",
)
_NAME_RULES |= _rules(
    "comparator_patch",
    ["torch.testing.assert_close", "torch.testing.assert_allclose"],
    "uses the harness's comparator",
    hot_only=True,
)
_NAME_RULES |= _rules(
    "lazy_output",
    [
        "torch.Tensor._make_subclass", "torch.Tensor._make_wrapper_subclass",
        "torch._C._disabled_torch_function_impl", "torch.overrides.TorchFunctionMode",
        "torch.utils._python_dispatch", "torch._C._TensorBase._make_subclass",
        "torch.overrides", "torch._subclasses",
        "torch._C._set_torch_function_mode", "torch._C._push_on_torch_dispatch_stack",
    ],
    "tensor subclass / dispatch-mode machinery: outputs may be lazy or ops intercepted",
)
_NAME_RULES |= _rules(
    "dynamic_code",
    [
        "exec", "eval", "compile", "marshal", "pickle", "_pickle", "dill", "cloudpickle",
        "runpy", "importlib.util", "importlib.machinery", "importlib.__import__",
        "importlib.abc", "zipimport", "types.FunctionType", "types.CodeType",
        "types.ModuleType", "base64", "binascii", "zlib.decompress", "bz2", "lzma",
        "codecs.decode", "torch.jit.load", "torch.package",
    ],
    "runs or decodes code/data the static checks cannot see",
)
_NAME_RULES |= _rules(
    "global_state",
    [
        "torch.set_float32_matmul_precision", "torch.set_num_threads",
        "torch.set_num_interop_threads", "torch.set_flush_denormal",
        "torch.use_deterministic_algorithms", "torch.set_deterministic_debug_mode",
        "torch.set_default_dtype", "torch.set_default_device", "torch.set_default_tensor_type",
        "torch.set_warn_always", "torch.cuda.set_per_process_memory_fraction",
        "torch.cuda.memory.set_per_process_memory_fraction", "torch.cuda.set_sync_debug_mode",
        "torch.cuda.set_rng_state", "torch.cuda.tunable", "torch.backends.cudnn.set_flags",
        "torch.set_anomaly_enabled", "torch.autograd.set_detect_anomaly",
        "torch.cuda.set_device", "os.putenv", "os.unsetenv", "torch.set_printoptions",
        "torch._C._jit_set_profiling_executor", "torch.cuda.set_allocator_settings",
        "torch.cuda.memory._set_allocator_settings", "torch.cuda.memory.change_current_allocator",
        "numpy.seterr",
    ],
    "changes process-wide state that also affects the reference",
)
_NAME_RULES |= _rules(
    "reduced_precision",
    [
        "torch.float16", "torch.half", "torch.HalfTensor", "torch.cuda.HalfTensor",
        "numpy.float16", "numpy.half", "triton.language.float16", "torch.complex32",
        "torch.chalf",
    ],
    "uses float16",
    flag="allow_reduced_precision",
    precision="fp16",
)
_NAME_RULES |= _rules(
    "reduced_precision",
    [
        "torch.bfloat16", "torch.BFloat16Tensor", "torch.cuda.BFloat16Tensor",
        "triton.language.bfloat16",
    ],
    "uses bfloat16",
    flag="allow_reduced_precision",
    precision="bf16",
)
_NAME_RULES |= _rules(
    "reduced_precision",
    [
        "torch.float8_e4m3fn", "torch.float8_e5m2", "torch.float8_e4m3fnuz",
        "torch.float8_e5m2fnuz", "torch.float8_e8m0fnu", "torch.float4_e2m1fn_x2",
        "triton.language.float8e4nv", "triton.language.float8e5", "triton.language.float8e4b15",
        "torch._scaled_mm",
    ],
    "uses 8-bit (or smaller) floats",
    flag="allow_reduced_precision",
    precision="fp8",
)
_NAME_RULES |= _rules(
    "reduced_precision",
    [
        "torch.autocast", "torch.amp", "torch.cuda.amp", "torch.cpu.amp",
        "torch.get_autocast_gpu_dtype", "torch.set_autocast_enabled",
    ],
    "uses autocast (mixed precision)",
    flag="allow_reduced_precision",
    precision="autocast",
)
_NAME_RULES |= _rules(
    "seed_access",
    [
        "torch.initial_seed", "torch.seed", "torch.get_rng_state", "torch.set_rng_state",
        "torch.cuda.initial_seed", "torch.cuda.seed", "torch.cuda.seed_all",
        "torch.cuda.get_rng_state", "torch.cuda.get_rng_state_all", "torch.cuda.set_rng_state_all",
        "torch.random.initial_seed", "torch.random.seed", "torch.random.get_rng_state",
        "torch.random.set_rng_state", "torch.random.fork_rng", "torch.default_generator",
        "torch.cuda.default_generators", "torch.Generator.get_state",
        "torch.Generator.initial_seed", "numpy.random.get_state", "numpy.random.set_state",
        "random.getstate", "random.setstate",
    ],
    "reads or restores the RNG state the harness uses to make inputs",
)
_NAME_RULES |= _rules(
    "seed_access",
    [
        "torch.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all",
        "torch.random.manual_seed", "numpy.random.seed", "random.seed",
    ],
    "re-seeds the RNG during the timed call / at import",
    hot_only=True,
)

# Attribute *writes* (assignment, setattr, delattr) are classified by target.
_TIMER_PREFIXES = (
    "time", "timeit", "torch.cuda.synchronize", "torch.cuda.Event", "torch.cuda.Stream",
    "torch.cuda.current_stream", "torch.cuda.default_stream", "torch.cuda.event",
    "torch.cuda.streams", "torch.synchronize", "torch.cpu.synchronize", "torch.Event",
    "torch.cuda.Event.elapsed_time", "torch.profiler", "torch.cuda.nvtx", "torch.cuda.profiler",
    "torch.utils.benchmark", "torch.cuda.cudart", "torch._C._cuda_synchronize",
    "torch.accelerator", "datetime",
)
_COMPARATOR_ATTRS = {
    "allclose", "isclose", "equal", "eq", "ne", "__eq__", "__ne__", "__bool__", "__sub__",
    "__rsub__", "__abs__", "abs", "sub", "max", "min", "amax", "all", "any", "isnan", "isinf",
    "isfinite", "item", "tolist", "le", "lt", "ge", "gt", "__lt__", "__le__", "__gt__", "__ge__",
    "array_equal", "assert_close", "assert_allclose", "testing", "numpy", "__float__", "sum",
    "nan_to_num", "__len__", "__getitem__", "cpu", "to", "float", "double", "count_nonzero",
}
_GLOBAL_STATE_PREFIXES = (
    "torch.backends", "torch._inductor.config", "torch._dynamo.config", "torch._functorch.config",
    "torch.jit._state", "torch._C._jit", "os.environ",
)
_TF32_NAMES = (
    "torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.fp32_precision", "torch.backends.cudnn.conv.fp32_precision",
    "torch.backends.fp32_precision", "torch.backends.cudnn.rnn.fp32_precision",
)

_FRAME_ATTRS = {
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "gi_frame", "cr_frame",
    "ag_frame", "tb_frame", "tb_next", "__globals__", "__builtins__", "__subclasses__",
    "__closure__", "__code__", "co_code", "__self__", "func_globals", "__getattribute__",
    "__reduce__", "__reduce_ex__", "__mro__", "__bases__", "__base__",
}
_MUTATING_METHODS = {
    "update", "setdefault", "append", "extend", "insert", "add", "__setitem__", "move_to_end",
    "appendleft", "extendleft", "put",
}
_COMPILE_CALLS = (
    "torch.utils.cpp_extension", "torch.compile", "torch.jit.script", "torch.jit.trace",
    "triton", "cupy.RawKernel", "cupy.RawModule", "cupy.ElementwiseKernel",
    "cupy.ReductionKernel", "pycuda.compiler", "numba", "torch.cuda.jiterator",
    "tilelang", "cuda.core", "torch.library.custom_op",
)
_ALLOC_CALLS = {
    "torch.empty", "torch.empty_like", "torch.zeros", "torch.zeros_like", "torch.ones",
    "torch.ones_like", "torch.full", "torch.full_like", "torch.empty_strided", "torch.arange",
    "torch.tensor", "torch.as_tensor",
}
# strict policy: what forward may still call from torch.
_STRICT_TORCH_ALLOWED = _ALLOC_CALLS | {
    "torch.Size", "torch.device", "torch.cuda.current_stream", "torch.cuda.current_device",
    "torch.cuda.is_available", "torch.cuda.get_device_properties", "torch.is_tensor",
    "torch.no_grad", "torch.inference_mode", "torch.broadcast_shapes", "torch.result_type",
    "torch.promote_types", "torch.finfo", "torch.iinfo", "torch.get_default_dtype",
    "torch.is_grad_enabled", "torch.cuda.get_device_capability", "torch.cuda.device",
    "torch.cuda.default_stream", "torch.empty_like", "torch._assert", "torch.is_floating_point",
    "torch.numel", "torch.jit.is_scripting", "torch.compiler.is_compiling", "torch.Tensor",
    "torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load",
    "torch.cuda.Event", "torch.get_device",
}
_TENSOR_COMPUTE_METHODS = {
    "matmul", "mm", "bmm", "addmm", "addmv", "addbmm", "baddbmm", "mv", "dot", "einsum", "relu",
    "relu_", "sigmoid", "sigmoid_", "tanh", "tanh_", "softmax", "log_softmax", "sum", "mean",
    "max", "min", "amax", "amin", "exp", "exp_", "log", "log_", "pow", "pow_", "sqrt", "rsqrt",
    "mul", "mul_", "add", "add_", "sub", "sub_", "div", "div_", "clamp", "clamp_", "clip",
    "abs", "neg", "norm", "var", "std", "cumsum", "cumprod", "prod", "argmax", "argmin", "sort",
    "topk", "gelu", "silu", "masked_fill", "masked_fill_", "where", "addcmul", "addcdiv", "lerp",
    "sin", "cos", "erf", "floor", "ceil", "round", "sign", "tril", "triu", "gather", "scatter",
    "scatter_add", "index_select", "index_add", "logsumexp", "square", "reciprocal", "expm1",
    "log1p", "hardtanh", "leaky_relu", "elu", "selu", "mish", "softplus", "conv2d", "linear",
    "maximum", "minimum", "fmod", "remainder", "flip", "roll", "cross", "diag", "outer",
    "kron", "cdist", "median", "mode", "quantile", "logical_and", "logical_or", "all", "any",
    "clone", "copy_", "cat", "repeat", "repeat_interleave", "tile", "__matmul__",
}
_HARMLESS_CALLS = {
    "len", "int", "float", "bool", "str", "range", "min", "max", "tuple", "list", "isinstance",
    "getattr", "hasattr", "print", "math", "divmod", "abs", "round", "type", "super",
}

_BUILTINS_REF = {
    "exec", "eval", "compile", "__import__", "open", "exit", "quit", "id", "hash", "globals",
    "vars", "locals", "getattr", "setattr", "delattr", "breakpoint", "input", "help",
    "memoryview", "object", "type", "__build_class__", "__builtins__",
}

# Submodules re-exported under a shorter name: normalise to the name the rules use.
_NORMALIZE = (
    ("torch.cuda.streams", "torch.cuda"),
    ("torch.cuda.graphs", "torch.cuda"),
    ("torch.cuda.random", "torch.cuda"),
    ("torch._C._TensorBase", "torch.Tensor"),
    ("torch._C.TensorBase", "torch.Tensor"),
    ("torch._tensor.Tensor", "torch.Tensor"),
    ("torch.nn.parameter.Parameter", "torch.nn.Parameter"),
    ("torch.cuda.amp.autocast_mode", "torch.cuda.amp"),
    ("torch.amp.autocast_mode", "torch.amp"),
    ("torch.functional", "torch"),
)


def _normalize(name: str) -> str:
    for old, new in _NORMALIZE:
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return name


def _prefixes(name: str) -> Iterator[str]:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        yield ".".join(parts[:i])


def _match_rule(name: str) -> tuple[str, _Rule] | None:
    for prefix in _prefixes(name):
        rule = _NAME_RULES.get(prefix)
        if rule is not None:
            return prefix, rule
    # torch._C._set_* private setters
    if name.startswith("torch._C._set_") or name.startswith("torch._C._jit_set_"):
        return name, _Rule("global_state", "private torch setter changes process-wide state")
    return None


# --------------------------------------------------------------------------------------------
# C++ / CUDA source scanning (regexes on the *string contents*, after stripping comments).
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CppRule:
    guard: str
    pattern: re.Pattern[str]
    reason: str
    flag: str | None = None
    precision: str | None = None


def _cpp(guard: str, pattern: str, reason: str, **kw: object) -> _CppRule:
    return _CppRule(guard, re.compile(pattern), reason, **kw)  # type: ignore[arg-type]


_CPP_RULES: tuple[_CppRule, ...] = (
    _cpp("side_stream", r"\bcudaStreamCreate\w*|\bcuStreamCreate\w*",
         "creates a CUDA stream; work on it escapes the timer", flag="allow_streams"),
    _cpp("side_stream", r"\bgetStreamFromPool\b|\bgetStreamFromExternal\b",
         "takes a side stream from the pool; work on it escapes the timer", flag="allow_streams"),
    _cpp("side_stream", r"\bcudaStreamNonBlocking\b|\bcudaStreamPerThread\b|\bcudaStreamLegacy\b",
         "uses a non-default stream", flag="allow_streams"),
    _cpp("side_stream", r"\bsetCurrentCUDAStream\b|\bCUDAStreamGuard\b|\bCUDAMultiStreamGuard\b",
         "switches the current CUDA stream", flag="allow_streams"),
    _cpp("side_stream", r"\bcublasSetStream\w*|\bcudnnSetStream\b|\bcublasLtSetStream\w*",
         "binds a library handle to another stream", flag="allow_streams"),
    _cpp("side_stream", r"\bcudaLaunchHostFunc\b|\bcuLaunchHostFunc\b|\bcudaStreamAddCallback\b",
         "enqueues host callbacks", flag="allow_streams"),
    _cpp("host_thread", r"\bstd\s*::\s*j?thread\b|\bboost\s*::\s*thread\b",
         "starts a host thread (std::thread) that can outlive the call", flag="allow_threads"),
    _cpp("host_thread", r"\bstd\s*::\s*async\b|\bstd\s*::\s*launch\s*::\s*async\b",
         "std::async runs work on another thread", flag="allow_threads"),
    _cpp("host_thread", r"\bpthread_create\b|\bthrd_create\b|\bclone\s*\(",
         "pthread_create starts a host thread", flag="allow_threads"),
    _cpp("host_thread", r"\.\s*detach\s*\(\s*\)",
         "detach() lets a thread run past the end of the call", flag="allow_threads"),
    _cpp("cuda_graph", r"\bcudaGraph\w*|\bcuGraph\w*|\bcudaStreamBeginCapture\w*|"
         r"\bcudaStreamEndCapture\b|\bcuStreamBeginCapture\w*|\bCUDAGraph\b",
         "uses CUDA graphs", flag="allow_cuda_graphs"),
    _cpp("l2_persistence", r"\bcudaLimitPersistingL2CacheSize\b|\bcudaDeviceSetLimit\b|"
         r"\bcudaStreamSetAttribute\b|\baccessPolicyWindow\b|\bcudaCtxResetPersistingL2Cache\b|"
         r"\bcudaAccessPropertyPersisting\b|\bcuCtxSetLimit\b|\bcuStreamSetAttribute\b",
         "configures persisting L2 cache, which keeps data hot across timed calls"),
    _cpp("dynamic_code", r"\bdlopen\b|\bdlsym\b|\bdlvsym\b|\bdlmopen\b|"
         r"\bcudaGetDriverEntryPoint\w*|\bcuGetProcAddress\w*",
         "looks functions up at run time (dlopen/dlsym); the symbol check cannot see them"),
    _cpp("harness_access", r"\bpy(?:bind11)?\s*::\s*module_?\s*::\s*import\b|"
         r"\bPyImport_\w+|\bPyRun_\w+|\bPy_CompileString\w*|\bpy(?:bind11)?\s*::\s*(?:exec|eval)\b"
         r"|\bPyEval_GetGlobals\b|\bPyEval_GetFrame\b|\bPyThreadState_GetFrame\b",
         "runs or imports Python from C++, reaching the harness"),
    _cpp("harness_access", r"__attribute__\s*\(\s*\(\s*constructor",
         "runs code when the library is loaded"),
    _cpp("monkeypatch", r"\bTORCH_LIBRARY_IMPL\s*\(\s*aten\b|\bTORCH_LIBRARY_FRAGMENT\s*\(\s*aten\b",
         "overrides ATen operators that the reference and the comparator also use"),
    _cpp("symbol_interposition",
         r"\b(?P<tok>cudaEventElapsedTime|cudaEventRecord|cudaEventSynchronize|cudaEventQuery|"
         r"cudaDeviceSynchronize|cudaStreamSynchronize|cudaStreamQuery|cuEventElapsedTime|"
         r"cuCtxSynchronize|cuStreamSynchronize|cuEventRecord|cuEventSynchronize|clock_gettime|"
         r"gettimeofday|clock|time|timespec_get)\s*\([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*\)\s*"
         r"(?:noexcept\s*)?\{",
         "defines a function named like a timing/synchronisation API (symbol interposition)"),
    _cpp("symbol_interposition", r"\bLD_PRELOAD\b",
         "mentions LD_PRELOAD"),
    _cpp("process_abuse", r"(?<![\w.>:])(?:std\s*::\s*)?(?:_exit|quick_exit|_Exit|"
         r"system|popen|fork|vfork|execv\w*|execl\w*|kill|raise|sigaction|signal|ptrace|"
         r"prctl|setrlimit)\s*\(",
         "controls the process (exit/fork/exec/signals) from C++"),
    _cpp("process_abuse", r"\bcudaDeviceReset\b|\bcuCtxDestroy\w*|\bcuDevicePrimaryCtxReset\w*",
         "resets or destroys the CUDA context"),
    _cpp("network", r"\bsocket\s*\(|<sys/socket\.h>|\bgetaddrinfo\b|\bcurl_\w+",
         "network access from C++"),
    _cpp("filesystem", r"\bfopen\s*\(|\bstd\s*::\s*[io]?fstream\b|/dev/shm|\bshm_open\b|"
         r"\bmmap\s*\(",
         "touches files / shared memory from C++"),
    _cpp("caching", r"\bstatic\s+(?:const\s+)?(?:torch|at)\s*::\s*Tensor\b|"
         r"\bstatic\s+std\s*::\s*(?:unordered_)?map\s*<\s*(?:const\s+)?(?:void|float|"
         r"int64_t|uintptr_t|at\s*::\s*Tensor)",
         "keeps tensors (or pointer-keyed maps) alive across calls in a static variable"),
    _cpp("reduced_precision", r"\b__half2?\b|\bhalf2\b|__float2half\w*|__half2float\w*|"
         r"__hadd\w*|__hmul\w*|__hfma\w*|\bkHalf\b|\bkFloat16\b|\bat\s*::\s*Half\b|"
         r"\bc10\s*::\s*Half\b|\bwmma\s*::\s*fragment\s*<[^>]*\bhalf\b|"
         r"mma\.sync[\w.]*\.f16|\bwgmma[\w.]*\.f16",
         "uses float16 arithmetic", flag="allow_reduced_precision", precision="fp16"),
    _cpp("reduced_precision", r"\b__nv_bfloat162?\b|__float2bfloat16\w*|\bkBFloat16\b|"
         r"\bat\s*::\s*BFloat16\b|\bc10\s*::\s*BFloat16\b|mma\.sync[\w.]*\.bf16|"
         r"\bwgmma[\w.]*\.bf16|\bwmma\s*::\s*fragment\s*<[^>]*__nv_bfloat16",
         "uses bfloat16 arithmetic", flag="allow_reduced_precision", precision="bf16"),
    _cpp("reduced_precision", r"\b__nv_fp8\w*|\.e4m3\b|\.e5m2\b|\bkFloat8\w*|\bFloat8_e\w+",
         "uses 8-bit floats", flag="allow_reduced_precision", precision="fp8"),
    _cpp("reduced_precision", r"\bprecision\s*::\s*tf32\b|__float_to_tf32|\.tf32\b|"
         r"CUBLAS_TF32_TENSOR_OP_MATH|CUBLAS_COMPUTE_32F_FAST_\w+|CUBLAS_TENSOR_OP_MATH",
         "uses TF32 tensor-core math for float32", flag="allow_reduced_precision",
         precision="tf32"),
)

_CPP_LOOKS = re.compile(
    r"#\s*include|__global__|__device__|PYBIND11_MODULE|\btorch\s*::|\bat\s*::|extern\s+\"C\"|"
    r"TORCH_LIBRARY|\bstd\s*::|\bvoid\s+\w+\s*\(|\bblockIdx\b|\bthreadIdx\b|\bcuda[A-Z]\w*\s*\("
)
_CPP_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _strip_cpp_comments(text: str) -> str:
    # keep newlines so line offsets stay right
    return _CPP_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def check_cpp_source(
    text: str,
    policy: GuardPolicy = GuardPolicy(),  # noqa: B008 - frozen dataclass, immutable default
    *,
    first_line: int | None = None,
    allowed_precisions: frozenset[str] = frozenset(),
    where: str = "C++/CUDA source",
) -> list[Finding]:
    """Scan one C++/CUDA source text. ``first_line`` is the Python line the text starts on."""
    code = _strip_cpp_comments(text)
    found: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for rule in _CPP_RULES:
        if policy.allows(rule.flag):
            continue
        if rule.precision is not None and rule.precision in allowed_precisions:
            continue
        for m in rule.pattern.finditer(code):
            raw = m.group("tok") if "tok" in rule.pattern.groupindex else m.group(0)
            token = re.sub(r"\s+", "", raw)[:60]
            if (rule.guard, token) in seen:
                continue
            seen.add((rule.guard, token))
            line = None if first_line is None else first_line + code.count("\n", 0, m.start())
            prefix = f"line {line}: " if line is not None else ""
            found.append(Finding(rule.guard, f"{prefix}{where} contains `{token}`: {rule.reason}",
                                 line))
    return found


# --------------------------------------------------------------------------------------------
# Reduced-precision families that the reference uses (those are then allowed).
# --------------------------------------------------------------------------------------------

_REF_PRECISION = {
    "fp16": re.compile(r"(?<!b)float16|\bhalf\b|\.half\(|HalfTensor|kHalf|__half|\bfp16\b|\bf16\b"),
    "bf16": re.compile(r"bfloat16|\bbf16\b|kBFloat16|BFloat16"),
    "fp8": re.compile(r"float8|\bfp8\b|e4m3|e5m2"),
    "tf32": re.compile(r"allow_tf32\s*=\s*True|tf32|set_float32_matmul_precision\(\s*['\"](?:high|medium)"),
    "autocast": re.compile(r"autocast"),
}


def reference_precisions(reference_source: str | None) -> frozenset[str]:
    """The reduced-precision families the reference source mentions (fp16, bf16, fp8, ...)."""
    if not reference_source:
        return frozenset()
    fams = {fam for fam, rx in _REF_PRECISION.items() if rx.search(reference_source)}
    if fams & {"fp16", "bf16"}:
        fams.add("autocast")  # autocast to a dtype the reference already runs in
    return frozenset(fams)


# --------------------------------------------------------------------------------------------
# The AST analysis.
# --------------------------------------------------------------------------------------------


@dataclass
class _Func:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None
    params: list[str] = field(default_factory=list)


class _Analyzer(ast.NodeVisitor):
    def __init__(self, tree: ast.Module, policy: GuardPolicy, precisions: frozenset[str]) -> None:
        self.tree = tree
        self.policy = policy
        self.precisions = precisions
        self.findings: list[Finding] = []
        self._seen: set[tuple[str, int | None, str]] = set()
        self.aliases: dict[str, str] = {}
        self.local_names: set[str] = set()
        self.str_consts: dict[str, ast.expr] = {}
        self.module_containers: set[str] = set()
        self.module_funcs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.classes: dict[str, dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self.hot: set[int] = set()
        self.compiled_attrs: set[str] = set()
        self.compiled_names: set[str] = set()
        self.param_attrs: set[str] = set()
        self.func_stack: list[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda] = []
        self.class_stack: list[str] = []
        self.with_items: set[int] = set()
        self.docstrings: set[int] = set()
        self.cpp_arg_nodes: set[int] = set()

    # ---- reporting -------------------------------------------------------------------------
    def add(self, guard: str, node: ast.AST | None, what: str) -> None:
        line = getattr(node, "lineno", None) if node is not None else None
        key = (guard, line, what)
        if key in self._seen:
            return
        self._seen.add(key)
        prefix = f"line {line}: " if line is not None else ""
        self.findings.append(Finding(guard, prefix + what, line))

    def report_rule(self, node: ast.AST, name: str, rule: _Rule, verb: str = "") -> None:
        if self.policy.allows(rule.flag):
            return
        if rule.precision is not None and rule.precision in self.precisions:
            return
        if rule.hot_only and not (self.in_hot() or not self.func_stack):
            return
        self.add(rule.guard, node, f"{verb}{name}: {rule.reason}")

    # ---- context ---------------------------------------------------------------------------
    def in_hot(self) -> bool:
        return any(id(f) in self.hot for f in self.func_stack)

    def current_method(self) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for f in reversed(self.func_stack):
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                return f
        return None

    # ---- name resolution -------------------------------------------------------------------
    def resolve(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """Dotted name an expression refers to (through aliases), or None."""
        if node is None or depth > 50:
            return None
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            if node.id in self.local_names:
                return None if node.id not in ("self",) else "self"
            return node.id
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value, depth + 1)
            return _normalize(f"{base}.{node.attr}") if base else None
        if isinstance(node, ast.Call):
            fn = self.resolve(node.func, depth + 1)
            if fn == "getattr" and len(node.args) >= 2:
                attr = self.const_str(node.args[1])
                base = self.resolve(node.args[0], depth + 1)
                if attr is not None and base:
                    return _normalize(f"{base}.{attr}")
                return None
            if fn in ("__import__", "importlib.import_module", "importlib.__import__") and node.args:
                mod = self.const_str(node.args[0])
                if mod is None:
                    return None
                fromlist = len(node.args) >= 4 or any(k.arg == "fromlist" for k in node.keywords)
                if fn == "importlib.import_module" or fromlist:
                    return _normalize(mod)
                return mod.split(".")[0]
            return None
        if isinstance(node, ast.Subscript):
            base = self.resolve(node.value, depth + 1)
            key = self.const_str(node.slice)
            if base in ("sys.modules",) and key:
                return _normalize(key)
            if base and key and base.endswith(".__dict__"):
                return _normalize(f"{base[: -len('.__dict__')]}.{key}")
            return None
        return None

    def const_str(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """Value of a string expression built from constants and module-level string names."""
        if node is None or depth > 40:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.str_consts:
            return self.const_str(self.str_consts[node.id], depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a = self.const_str(node.left, depth + 1)
            b = self.const_str(node.right, depth + 1)
            return None if a is None or b is None else a + b
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return self.const_str(node.left, depth + 1)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.FormattedValue):
                    s = self.const_str(v.value, depth + 1)
                    parts.append(s if s is not None else "")
                else:
                    s = self.const_str(v, depth + 1)
                    parts.append(s or "")
            return "".join(parts)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "format":
                return self.const_str(node.func.value, depth + 1)
            if node.func.attr == "join" and node.args:
                sep = self.const_str(node.func.value, depth + 1)
                seq = node.args[0]
                if sep is not None and isinstance(seq, ast.List | ast.Tuple):
                    items = [self.const_str(e, depth + 1) for e in seq.elts]
                    if all(i is not None for i in items):
                        return sep.join(items)  # type: ignore[arg-type]
        if isinstance(node, ast.List | ast.Tuple):
            items = [self.const_str(e, depth + 1) for e in node.elts]
            if items and all(i is not None for i in items):
                return "\n".join(items)  # type: ignore[arg-type]
        return None

    # ---- pass 1: collect -------------------------------------------------------------------
    def collect(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = _normalize(a.name)
                    else:
                        top = a.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom):
                mod = "." * node.level + (node.module or "")
                for a in node.names:
                    if a.name == "*":
                        continue
                    self.aliases[a.asname or a.name] = _normalize(f"{mod}.{a.name}")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.local_names.add(node.name)
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                        self.local_names.add(a.arg)
                    for a in (node.args.vararg, node.args.kwarg):
                        if a is not None:
                            self.local_names.add(a.arg)
            elif isinstance(node, ast.Lambda):
                for a in node.args.args:
                    self.local_names.add(a.arg)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    self.docstrings.add(id(body[0].value))
        # simple name bindings, iterated to a fixpoint so chains of aliases resolve
        assigns: list[tuple[str, ast.expr]] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        assigns.append((t.id, node.value))
                    elif isinstance(t, ast.Tuple | ast.List):
                        for e in t.elts:
                            if isinstance(e, ast.Name):
                                self.local_names.add(e.id)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
                if isinstance(node, ast.AnnAssign) and node.value is not None:
                    assigns.append((node.target.id, node.value))
                else:
                    self.local_names.add(node.target.id)
            elif isinstance(node, ast.NamedExpr):
                assigns.append((node.target.id, node.value))
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                for e in ast.walk(node.target):
                    if isinstance(e, ast.Name):
                        self.local_names.add(e.id)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                for e in ast.walk(node.optional_vars):
                    if isinstance(e, ast.Name):
                        self.local_names.add(e.id)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.local_names.add(node.name)
        for name, _ in assigns:
            if name not in self.aliases:
                self.local_names.add(name)
        for _ in range(5):
            changed = False
            for name, value in assigns:
                if isinstance(value, ast.Name | ast.Attribute | ast.Call | ast.Subscript):
                    target = self.resolve(value)
                    if target and target != name and target not in ("self",) and (
                            isinstance(value, ast.Call) or not target.startswith("self.")):
                        # only module-ish names: something imported, or a builtin we track
                        root = target.split(".")[0]
                        if (isinstance(value, ast.Call) or root in self.aliases.values()
                                or root in _BUILTINS_REF
                                or any(v.startswith(root + ".") for v in self.aliases.values())
                                or _match_rule(target)):
                            if self.aliases.get(name) != target:
                                self.aliases[name] = target
                                self.local_names.discard(name)
                                changed = True
            if not changed:
                break
        # module-level string constants and containers
        for stmt in self.tree.body:
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(stmt, ast.Assign):
                targets, value = stmt.targets, stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                targets, value = [stmt.target], stmt.value
            elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
                if isinstance(stmt.target, ast.Name) and stmt.target.id in self.str_consts:
                    prev = self.str_consts[stmt.target.id]
                    self.str_consts[stmt.target.id] = ast.BinOp(prev, ast.Add(), stmt.value)
                continue
            for t in targets:
                if not isinstance(t, ast.Name) or value is None:
                    continue
                if self.const_str(value) is not None:
                    self.str_consts[t.id] = value
                if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp):
                    self.module_containers.add(t.id)
                elif isinstance(value, ast.Call):
                    fn = self.resolve(value.func) or ""
                    if fn.split(".")[-1] in ("dict", "list", "set", "OrderedDict", "defaultdict",
                                             "deque", "WeakKeyDictionary", "WeakValueDictionary",
                                             "Counter", "ChainMap"):
                        self.module_containers.add(t.id)
        # functions, classes, hot path
        for stmt in self.tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                self.module_funcs[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = {
                    s.name: s for s in stmt.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                }
        work: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]] = []
        for cname, methods in self.classes.items():
            for root in ("forward", "__call__", "_call_impl"):
                if root in methods:
                    work.append((methods[root], cname))
        while work:
            fn, cname = work.pop()
            if id(fn) in self.hot:
                continue
            self.hot.add(id(fn))
            for sub in ast.walk(fn):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                        and sub.value.id == "self" and cname is not None:
                    m = self.classes.get(cname, {}).get(sub.attr)
                    if m is not None:
                        work.append((m, cname))
                elif isinstance(sub, ast.Name) and sub.id in self.module_funcs:
                    work.append((self.module_funcs[sub.id], None))
                elif isinstance(sub, ast.Name) and sub.id in self.classes:
                    for m in self.classes[sub.id].values():
                        work.append((m, sub.id))
        # names and self attributes holding compiled modules / parameters
        for _ in range(2):
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign) and self.is_compiled_value(node.value) and \
                        not isinstance(node.value, ast.Constant):
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            self.compiled_names.add(t.id)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if _self_attr(t) and self.is_compiled_value(node.value) and \
                            not isinstance(node.value, ast.Constant):
                        self.compiled_attrs.add(_self_attr(t) or "")
                    if _self_attr(t) and isinstance(node.value, ast.Call):
                        fn = self.resolve(node.value.func) or ""
                        if fn.startswith("torch.") or fn.endswith("Parameter"):
                            self.param_attrs.add(_self_attr(t) or "")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "register_buffer" and node.args:
                n = self.const_str(node.args[0])
                if n:
                    self.param_attrs.add(n)

    def is_compiled_value(self, value: ast.AST) -> bool:
        if isinstance(value, ast.Constant):
            return True
        if isinstance(value, ast.Call):
            fn = self.resolve(value.func) or ""
            if any(fn == p or fn.startswith(p + ".") for p in _COMPILE_CALLS):
                return True
            if fn in ("load_inline", "load") or fn.endswith("load_inline"):
                return True
            if fn in self.module_funcs:  # a local builder function; judged on its own body
                return self.func_returns_compiled(self.module_funcs[fn])
        if isinstance(value, ast.Attribute):
            # self._fn = self._mod.forward  /  mod.kernel
            base = value.value
            if _self_attr(base) in self.compiled_attrs:
                return True
            return isinstance(base, ast.Name) and (
                base.id in self.aliases or base.id in self.compiled_names)
        if isinstance(value, ast.Name):
            return (value.id in self.module_funcs or value.id in self.aliases
                    or value.id in self.compiled_names)
        return False

    def func_returns_compiled(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
        if not rets:
            return False
        for r in rets:
            v = r.value
            if isinstance(v, ast.Call) and self.is_compiled_value(v):
                continue
            if isinstance(v, ast.Name | ast.Attribute | ast.Constant):
                continue
            return False
        return True

    # ---- pass 2: visit ---------------------------------------------------------------------
    def run(self) -> list[Finding]:
        self.collect()
        self.visit(self.tree)
        self.scan_strings()
        return self.findings

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add("lazy_output", node, f"defines {node.name}, which intercepts tensor operations")
        if node.name in ("__del__",):
            self.add("process_abuse", node, "defines __del__, code that runs at teardown")
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            name = self.resolve(target) or ""
            if name in ("functools.lru_cache", "functools.cache", "functools.cached_property"):
                params = [a for a in node.args.args if a.arg not in ("self", "cls")]
                if params or node.args.vararg or node.args.kwarg or node.args.kwonlyargs:
                    self.add("caching", dec,
                             f"@{name} on {node.name}() memoises results across calls "
                             "(tensors hash by identity, so repeated inputs hit the cache)")
        self.func_stack.append(node)
        self.generic_visit(node)
        self.func_stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.func_stack.append(node)
        self.generic_visit(node)
        self.func_stack.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            name = self.resolve(base) or ""
            if name in ("torch.Tensor", "Tensor", "torch.nn.Parameter") or name.endswith(".Tensor"):
                self.add("lazy_output", node,
                         f"class {node.name} subclasses {name}; outputs may be lazy or fake")
            if name.startswith("torch.utils._python_dispatch") or name.startswith("torch.overrides"):
                self.add("lazy_output", node, f"class {node.name} is a dispatch/function mode")
        for kw in node.keywords:
            if kw.arg == "metaclass":
                self.add("dynamic_code", node, f"class {node.name} uses a custom metaclass")
        self.class_stack.append(node.name)
        self.generic_visit(node)
        self.class_stack.pop()

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.check_name(node, _normalize(a.name), verb="imports ")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        if node.level == 0:
            self.check_name(node, _normalize(mod), verb="imports ")
            for a in node.names:
                if a.name == "*":
                    self.add("dynamic_code", node, f"`from {mod} import *` hides which names are used")
                else:
                    self.check_name(node, _normalize(f"{mod}.{a.name}"), verb="imports ")

    def check_name(self, node: ast.AST, name: str, verb: str = "") -> bool:
        if not self.policy.allow_triton and (name == "triton" or name.startswith("triton.")):
            self.add("triton", node, f"{verb}{name}: Triton is not allowed by this policy")
        m = _match_rule(name)
        if m is None:
            return False
        self.report_rule(node, name, m[1], verb)
        return True

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            name = self.resolve(node)
            if name and (node.id in self.aliases or node.id in _BUILTINS_REF):
                self.check_name(node, name)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _FRAME_ATTRS:
            self.add("harness_access", node,
                     f"`.{node.attr}` reaches frames/globals/closures of other code")
        if node.attr == "__dict__":
            base = self.resolve(node.value)
            if base and base != "self":
                self.add("monkeypatch", node, f"{base}.__dict__ exposes a module/class namespace")
        if node.attr == "__class__" and isinstance(node.ctx, ast.Store):
            self.add("lazy_output", node, "assigning __class__ changes an object's type")
        if node.attr in ("as_subclass", "_make_subclass", "_make_wrapper_subclass"):
            self.add("lazy_output", node, f".{node.attr}() turns a tensor into a subclass")
        if self.in_hot() and isinstance(node.ctx, ast.Load):
            if node.attr in ("_version", "_cdata"):
                self.add("caching", node,
                         f"reads .{node.attr} in forward; fingerprints an input across calls")
        if isinstance(node.ctx, ast.Load):
            name = self.resolve(node)
            if name and name.split(".")[0] != "self" and self.check_name(node, name):
                return  # matched the full chain; don't report its prefixes again
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        name = self.resolve(node)
        if name:
            base = self.resolve(node.value)
            if base == "sys.modules" or (base or "").endswith("__dict__"):
                self.check_name(node, name, verb="reaches ")
        self.generic_visit(node)

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.with_items.add(id(item.context_expr))
        self.generic_visit(node)

    visit_AsyncWith = visit_With  # noqa: N815

    def visit_Global(self, node: ast.Global) -> None:
        method = self.current_method()
        if not self.in_hot() or method is None:
            return
        names = set(node.names)
        for sub in ast.walk(method):
            if isinstance(sub, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                hit = [t.id for t in targets if isinstance(t, ast.Name) and t.id in names]
                if hit and (sub.value is None or not self.is_compiled_value(sub.value)):
                    self.add("caching", sub, f"forward assigns global {hit[0]} = "
                             f"<{_short(sub.value) if sub.value else ''}>: state across calls")

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        name = self.resolve(exc) if exc is not None else None
        if name in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
            self.add("process_abuse", node, f"raises {name}, which ends the worker process")
        self.generic_visit(node)

    # -- writes ------------------------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self.check_store(t, node.value, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.check_store(node.target, node.value, node, augmented=True)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.check_store(node.target, node.value, node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self.check_store(t, None, node)
        self.generic_visit(node)

    def check_store(self, target: ast.AST, value: ast.AST | None, stmt: ast.AST,
                    augmented: bool = False) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for e in target.elts:
                self.check_store(e, None, stmt)
            return
        if isinstance(target, ast.Starred):
            self.check_store(target.value, None, stmt)
            return
        if isinstance(target, ast.Attribute):
            base = self.resolve(target.value)
            if base == "self" or (isinstance(target.value, ast.Name) and target.value.id == "self"):
                self.check_self_store(target.attr, value, stmt, augmented)
                return
            if base and self.is_module_like(base):
                self.classify_patch(stmt, f"{base}.{target.attr}", "assigns")
            return
        if isinstance(target, ast.Subscript):
            base = self.resolve(target.value)
            if base == "os.environ":
                self.add("global_state", stmt, "writes os.environ (seen by the whole process)")
                return
            if base and base.endswith(".__dict__"):
                key = self.const_str(target.slice)
                self.classify_patch(stmt, f"{base[: -len('.__dict__')]}.{key or '?'}",
                                    "writes __dict__ of")
                return
            if base == "sys.modules":
                self.add("harness_access", stmt, "writes sys.modules")
                return
            inner = target.value
            attr = _self_attr(inner)
            if attr is not None and self.in_hot():
                self.add("caching", stmt,
                         f"forward stores into self.{attr}[...]: a cache that persists across calls")
                return
            if isinstance(inner, ast.Name) and inner.id in self.module_containers and self.in_hot():
                self.add("caching", stmt,
                         f"forward stores into module-level {inner.id}[...]: state across calls")
            return

    def is_module_like(self, name: str) -> bool:
        root = name.split(".")[0]
        return root in {v.split(".")[0] for v in self.aliases.values()} or root in (
            "builtins", "__builtins__", "sys", "gc", "torch", "time", "os")

    def classify_patch(self, node: ast.AST, target: str, verb: str) -> None:
        target = _normalize(target)
        last = target.split(".")[-1]
        if target in _TF32_NAMES:
            if not self.policy.allow_reduced_precision and "tf32" not in self.precisions:
                self.add("reduced_precision", node, f"{verb} {target}: enables TF32/reduced "
                         "precision math for float32")
            self.add("global_state", node, f"{verb} {target}: process-wide flag also changes "
                     "the reference")
            return
        if target.startswith(_GLOBAL_STATE_PREFIXES):
            if "cudagraph" in target and not self.policy.allow_cuda_graphs:
                self.add("cuda_graph", node, f"{verb} {target}: turns on CUDA graphs")
            self.add("global_state", node, f"{verb} {target}: process-wide flag also changes "
                     "the reference")
            return
        if any(target == p or target.startswith(p + ".") for p in _TIMER_PREFIXES) or any(
                k in last for k in ("synchronize", "elapsed_time", "perf_counter", "record")):
            self.add("timer_patch", node, f"{verb} {target}: patches the timer/synchronisation")
            return
        if last in _COMPARATOR_ATTRS or target.startswith(("torch.testing", "numpy.testing")):
            self.add("comparator_patch", node, f"{verb} {target}: patches what the comparator uses")
            return
        root = target.split(".")[0]
        if root in ("builtins", "__builtins__", "sys", "gc", "inspect", "importlib"):
            self.add("harness_access", node, f"{verb} {target}: patches interpreter internals")
            return
        self.add("monkeypatch", node, f"{verb} {target}: patches a module that the reference "
                 "and harness share")

    def check_self_store(self, attr: str, value: ast.AST | None, stmt: ast.AST,
                         augmented: bool) -> None:
        if not self.in_hot() or value is None:
            return
        if augmented and isinstance(value, ast.Constant):
            return  # counters
        if self.is_compiled_value(value) or isinstance(value, ast.Constant):
            return
        if isinstance(value, ast.Attribute) and value.attr in ("shape", "dtype", "device", "ndim"):
            return
        if isinstance(value, ast.Call):
            fn = self.resolve(value.func) or ""
            if fn in _ALLOC_CALLS or (isinstance(value.func, ast.Attribute)
                                      and value.func.attr in ("new_empty", "new_zeros", "size",
                                                              "dim", "numel", "stride")):
                return  # workspace buffer; flagged only if forward returns it (visit_Return)
            if fn in ("dict", "list", "set", "collections.OrderedDict", "OrderedDict"):
                self.add("caching", stmt, f"forward creates container self.{attr}: a cache")
                return
        self.add("caching", stmt,
                 f"forward assigns self.{attr} = <{_short(value)}>: state kept across calls "
                 "(cached inputs/outputs)")

    def visit_Return(self, node: ast.Return) -> None:
        method = self.current_method()
        if method is not None and id(method) in self.hot and method.name == "forward" \
                and node.value is not None:
            vals = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for v in vals:
                inner = v
                while isinstance(inner, ast.Subscript | ast.Call) and not _self_attr(inner):
                    if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) \
                            and inner.func.attr in ("view", "reshape", "view_as", "reshape_as",
                                                    "narrow", "squeeze", "unsqueeze",
                                                    "transpose", "permute", "t", "flatten",
                                                    "expand", "as_strided", "detach"):
                        inner = inner.func.value
                    elif isinstance(inner, ast.Subscript):
                        inner = inner.value
                    else:
                        break
                attr = _self_attr(inner)
                if attr and attr not in self.compiled_attrs:
                    self.add("caching", node,
                             f"forward returns self.{attr}, a tensor stored on self; later calls "
                             "overwrite earlier results")
        self.generic_visit(node)

    # -- calls -------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        fn = self.resolve(node.func)
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        args = node.args
        if fn in ("setattr", "delattr", "object.__setattr__", "type.__setattr__",
                  "object.__delattr__") and args:
            self.check_setattr(node, fn, args)
        elif method in ("__setattr__", "__delattr__") and args:
            base = self.resolve(node.func.value)  # type: ignore[union-attr]
            if base and base != "self" and self.is_module_like(base):
                name = self.const_str(args[0])
                self.classify_patch(node, f"{base}.{name or '?'}", "setattr on")
        if fn in ("__import__", "importlib.import_module", "importlib.__import__") and args:
            mod = self.const_str(args[0])
            if mod is None:
                self.add("dynamic_code", node, f"{fn}() with a computed module name")
            else:
                self.check_name(node, _normalize(mod), verb=f"{fn}() imports ")
        if fn == "getattr" and len(args) >= 2 and self.const_str(args[1]) is not None:
            target = self.resolve(node)
            if target and not target.startswith("self."):
                self.check_name(node, target)
        if fn == "getattr" and len(args) >= 2 and self.const_str(args[1]) is None:
            base = self.resolve(args[0])
            if base and base != "self" and self.is_module_like(base):
                self.add("dynamic_code", node, f"getattr({base}, <computed name>) hides which "
                         "attribute is used")
        if fn in ("vars", "globals", "locals") and fn not in self.local_names:
            base = self.resolve(args[0]) if args else None
            if fn == "vars" and base and self.is_module_like(base):
                self.add("monkeypatch", node, f"vars({base}) exposes a module namespace")
            elif fn == "globals" and self.in_hot():
                self.add("caching", node, "globals() in forward: module state across calls")
        if fn in ("open", "io.open", "builtins.open", "os.fdopen", "codecs.open") or method in (
                "write_text", "write_bytes", "touch", "unlink", "rmdir", "symlink_to",
                "hardlink_to"):
            self.check_open(node, fn or f".{method}", method)
        if method in ("update", "setdefault", "pop", "popitem", "clear", "__setitem__",
                      "__delitem__") and self.resolve(node.func.value) == "os.environ":  # type: ignore[union-attr]
            self.add("global_state", node, f"os.environ.{method}() changes the environment of "
                     "the whole process")
        if fn in ("id", "hash") and self.in_hot():
            self.add("caching", node, f"{fn}() in forward fingerprints an input (identity cache)")
        if self.in_hot() and method in ("data_ptr", "untyped_storage", "storage", "_cdata",
                                        "unsafe_get"):
            self.add("caching", node,
                     f".{method}() in forward: pointer/storage identity used to recognise inputs")
        if self.in_hot() and method == "item" and isinstance(node.func, ast.Attribute):
            inner = node.func.value
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and \
                    inner.func.attr in ("sum", "mean", "norm", "max", "min", "abs", "prod",
                                        "std", "var", "amax", "amin"):
                self.add("caching", node, f".{inner.func.attr}().item() in forward: a value "
                         "fingerprint of the input")
        if self.in_hot() and method in _MUTATING_METHODS and isinstance(node.func, ast.Attribute):
            recv = node.func.value
            attr = _self_attr(recv)
            if attr is not None and attr not in self.param_attrs:
                self.add("caching", node, f"forward mutates self.{attr}.{method}(): a cache "
                         "that persists across calls")
            elif isinstance(recv, ast.Name) and recv.id in self.module_containers:
                self.add("caching", node, f"forward mutates module-level {recv.id}.{method}(): "
                         "state across calls")
        if method in ("half", "bfloat16") and not args and not node.keywords:
            fam = "fp16" if method == "half" else "bf16"
            if not self.policy.allow_reduced_precision and fam not in self.precisions:
                self.add("reduced_precision", node, f".{method}() casts to reduced precision")
        if fn in ("torch.set_grad_enabled",) and id(node) not in self.with_items:
            self.add("global_state", node, "torch.set_grad_enabled() outside a with-block "
                     "changes autograd for the reference too")
        if fn == "torch.compile" or (fn or "").endswith("torch.compile"):
            self.check_torch_compile(node)
        if fn in ("torch.library.Library", "torch.library.impl", "torch.library.define") and args:
            ns = self.const_str(args[0]) or ""
            if ns.split("::")[0] in ("aten", "prims", "") or ns.startswith("aten"):
                self.add("monkeypatch", node, f"{fn}({ns!r}) overrides ATen operators the "
                         "reference and comparator use")
        if fn == "triton.language.dot":
            for kw in node.keywords:
                v = self.const_str(kw.value)
                if (kw.arg == "allow_tf32" and isinstance(kw.value, ast.Constant)
                        and kw.value.value is True) or (kw.arg == "input_precision" and v == "tf32"):
                    if not self.policy.allow_reduced_precision and "tf32" not in self.precisions:
                        self.add("reduced_precision", node, "tl.dot with TF32 input precision")
        self.check_cpp_call(node, fn)
        if not self.policy.allow_torch_ops and self.in_hot():
            self.check_strict_call(node, fn, method)
        self.generic_visit(node)

    def check_setattr(self, node: ast.Call, fn: str, args: list[ast.expr]) -> None:
        obj = args[0]
        base = self.resolve(obj)
        if base == "self" or (isinstance(obj, ast.Name) and obj.id == "self"):
            if self.in_hot() and fn.startswith("setattr") and len(args) >= 3:
                name = self.const_str(args[1]) or "<computed>"
                self.check_self_store(name, args[2], node, False)
            return
        name = self.const_str(args[1]) if len(args) > 1 else None
        if base and self.is_module_like(base):
            if name is None:
                self.add("monkeypatch", node, f"{fn}({base}, <computed name>, ...) patches a "
                         "module attribute chosen at run time")
                self.add("dynamic_code", node, f"{fn}() with a computed attribute name")
            else:
                self.classify_patch(node, f"{base}.{name}", f"{fn}() on")
        elif base is None and isinstance(obj, ast.Call):
            # setattr(type(x), ...) / setattr(x.__class__, ...)
            inner = self.resolve(obj.func)
            if inner == "type":
                self.add("comparator_patch", node, f"{fn}(type(...), ...) patches a class such "
                         "as torch.Tensor")
        elif isinstance(obj, ast.Attribute) and obj.attr == "__class__":
            self.add("comparator_patch", node, f"{fn}(x.__class__, ...) patches a class such as "
                     "torch.Tensor")

    def check_open(self, node: ast.Call, fn: str, method: str | None) -> None:
        if method in ("write_text", "write_bytes", "touch", "unlink", "rmdir", "symlink_to",
                      "hardlink_to"):
            self.add("filesystem", node, f".{method}() writes to the filesystem")
            return
        mode_node: ast.expr | None = node.args[1] if len(node.args) > 1 else None
        for kw in node.keywords:
            if kw.arg == "mode":
                mode_node = kw.value
        mode = self.const_str(mode_node) if mode_node is not None else "r"
        path = self.const_str(node.args[0]) if node.args else None
        if mode is None:
            self.add("filesystem", node, f"{fn}() with a computed mode")
        elif any(c in mode for c in "wax+"):
            self.add("filesystem", node, f"{fn}(..., {mode!r}) writes a file")
        if path is not None and path.startswith(("/dev/shm", "/proc", "/sys", "/dev/")):
            self.add("filesystem", node, f"{fn}({path!r}) opens a shared/system path")

    def check_torch_compile(self, node: ast.Call) -> None:
        if self.policy.allow_cuda_graphs:
            return
        for kw in node.keywords:
            if kw.arg == "mode":
                mode = self.const_str(kw.value)
                if mode in ("reduce-overhead", "max-autotune"):
                    self.add("cuda_graph", node,
                             f"torch.compile(mode={mode!r}) records and replays CUDA graphs")
            if kw.arg == "options" and isinstance(kw.value, ast.Dict):
                for k, v in zip(kw.value.keys, kw.value.values, strict=False):
                    ks = self.const_str(k) if k is not None else None
                    if ks and "cudagraph" in ks and not (
                            isinstance(v, ast.Constant) and v.value is False):
                        self.add("cuda_graph", node, f"torch.compile(options={{{ks!r}: ...}}) "
                                 "turns on CUDA graphs")

    def check_cpp_call(self, node: ast.Call, fn: str | None) -> None:
        if not fn:
            return
        last = fn.split(".")[-1]
        kwnames: tuple[str, ...]
        if last == "load_inline":
            positions, kwnames = (1, 2), ("cpp_sources", "cuda_sources")
        elif last in ("RawKernel", "RawModule", "ElementwiseKernel", "ReductionKernel",
                      "SourceModule", "compile_ptx", "Program"):
            positions, kwnames = (0, 1, 2), ("code", "source", "operation", "src")
        else:
            return
        src_nodes = [node.args[i] for i in positions if i < len(node.args)]
        src_nodes += [kw.value for kw in node.keywords if kw.arg in kwnames]
        for s in src_nodes:
            if isinstance(s, ast.Constant) and s.value is None:
                continue
            text = self.const_str(s)
            if text is None or (not text.strip() and not isinstance(s, ast.Constant)):
                self.add("dynamic_code", node,
                         f"{last}() source `{_short(s)}` is computed at run time; its C++/CUDA "
                         "cannot be checked statically")
                continue
            for sub in ast.walk(s):
                self.cpp_arg_nodes.add(id(sub))
            for f in check_cpp_source(text, self.policy, first_line=None,
                                      allowed_precisions=self.precisions,
                                      where=f"{last}() source"):
                self.add(f.guard, node, f.reason)

    def check_strict_call(self, node: ast.Call, fn: str | None, method: str | None) -> None:
        if fn and (fn.startswith("torch.") or fn.startswith("torch.nn.functional")):
            if fn in _STRICT_TORCH_ALLOWED or fn.startswith(("torch.cuda.", "torch.utils.",
                                                             "torch.library", "torch._assert")):
                return
            self.add("torch_op", node, f"{fn}() is a PyTorch compute op; the strict policy "
                     "requires forward to use custom kernels")
            return
        if method in _TENSOR_COMPUTE_METHODS and isinstance(node.func, ast.Attribute):
            recv = node.func.value
            rname = self.resolve(recv)
            attr = _self_attr(recv)
            if attr in self.compiled_attrs or (isinstance(recv, ast.Name)
                                               and recv.id in self.compiled_names):
                return
            if rname and (rname in self.aliases.values() or rname.split(".")[0] in
                          {v.split(".")[0] for v in self.aliases.values()}) and rname != "self":
                return  # calls into a compiled module object, e.g. mod.matmul(...)
            self.add("torch_op", node, f".{method}() is a PyTorch compute op; the strict policy "
                     "requires forward to use custom kernels")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not self.policy.allow_torch_ops and self.in_hot() and isinstance(node.op, ast.MatMult):
            self.add("torch_op", node, "`@` is a PyTorch matmul; the strict policy requires "
                     "forward to use custom kernels")
        elif not self.policy.allow_torch_ops and self.in_hot() and (
                self.tensorish(node.left) or self.tensorish(node.right)):
            self.add("torch_op", node, f"tensor arithmetic `{_short(node)}` in forward; the "
                     "strict policy requires custom kernels")
        self.generic_visit(node)

    def tensorish(self, node: ast.AST) -> bool:
        method = self.current_method()
        if method is None:
            return False
        params = {a.arg for a in method.args.args[1:]}
        if isinstance(node, ast.Name):
            return node.id in params
        attr = _self_attr(node)
        return attr is not None and attr in self.param_attrs and attr not in self.compiled_attrs

    # -- strings that look like C++ ----------------------------------------------------------
    def scan_strings(self) -> None:
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if id(node) in self.docstrings:
                continue
            text = node.value
            if id(node) not in self.cpp_arg_nodes and not _CPP_LOOKS.search(text):
                continue
            for f in check_cpp_source(text, self.policy, first_line=node.lineno,
                                      allowed_precisions=self.precisions,
                                      where="C++/CUDA string"):
                self.add_finding(f)

    def add_finding(self, f: Finding) -> None:
        # C++ findings for the same token from the load_inline() call and from the string
        # itself are the same finding; keep the one with the precise line.
        token = f.reason.split("`")[1] if "`" in f.reason else f.reason
        for i, g in enumerate(self.findings):
            if g.guard == f.guard and "`" in g.reason and g.reason.split("`")[1] == token \
                    and "source contains" in g.reason:
                self.findings[i] = f
                return
        key = (f.guard, f.line, f.reason)
        if key not in self._seen:
            self._seen.add(key)
            self.findings.append(f)


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id == "self":
        return node.attr
    return None


def _short(node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 - unparse of odd trees; the message is best effort
        text = type(node).__name__
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_candidate_source(
    source: str,
    policy: GuardPolicy = GuardPolicy(),  # noqa: B008 - frozen dataclass, immutable default
    reference_source: str | None = None,
) -> list[Finding]:
    """Run every static guard on a candidate's source. An empty list means no guard fired.

    ``reference_source`` (the task file) exempts reduced precision the reference itself uses.
    Raises :class:`CandidateSyntaxError` (a ``ValueError``) if the candidate does not parse;
    that is a compile error of the candidate, not a hack.
    """
    try:
        with warnings.catch_warnings():  # SyntaxWarnings of the candidate are not ours
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename="<candidate>", mode="exec")
            # Some errors only the compiler reports (e.g. a bare starred expression, `*0`).
            compile(tree, "<candidate>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise CandidateSyntaxError(
            f"line {exc.lineno}: candidate is not valid Python: {exc.msg}", exc.lineno
        ) from exc
    except (ValueError, RecursionError, MemoryError) as exc:
        raise CandidateSyntaxError(f"candidate cannot be parsed: {exc}") from exc
    analyzer = _Analyzer(tree, policy, reference_precisions(reference_source))
    try:
        findings = analyzer.run()
    except RecursionError:
        findings = analyzer.findings + [
            Finding("dynamic_code", "candidate is nested too deeply to analyse statically")
        ]
    return sorted(findings, key=lambda f: (f.line if f.line is not None else -1, f.guard))
