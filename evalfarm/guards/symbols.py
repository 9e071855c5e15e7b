"""Static guard on a built extension: its ELF dynamic symbol table (imports and exports).

A small pure-Python ELF reader (32/64-bit, either endianness) reads ``.dynsym``/``.dynstr``.
Imported (undefined) symbols show what the library calls into -- the CUDA runtime, libc,
libpthread, libtorch -- however its source spelled it (macros, token pasting, templates).
Exported (defined) symbols show whether it *interposes* on a function the timer or the
comparator uses (a library that defines ``cudaEventElapsedTime`` or ``clock_gettime`` can
shadow the real one when loaded with global visibility).

What it cannot see: functions looked up at run time through ``dlsym``/``cuGetProcAddress`` (the
imports of those are themselves flagged), inline assembly (``syscall`` instructions) and code in
other libraries the extension loads.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from evalfarm.guards.findings import Finding
from evalfarm.guards.policy import GuardPolicy

__all__ = ["DynamicSymbol", "ElfError", "check_extension_symbols", "demangle", "read_dynamic_symbols", "read_symbols"]

_SHT_SYMTAB = 2
_SHT_DYNSYM = 11
_STB = {0: "LOCAL", 1: "GLOBAL", 2: "WEAK", 10: "GNU_UNIQUE"}
_STT = {0: "NOTYPE", 1: "OBJECT", 2: "FUNC", 3: "SECTION", 4: "FILE", 5: "COMMON", 6: "TLS",
        10: "IFUNC"}


class ElfError(ValueError):
    """The file is not an ELF shared object we can read."""


@dataclass(frozen=True)
class DynamicSymbol:
    name: str
    defined: bool  # False: imported (SHN_UNDEF)
    binding: str  # LOCAL / GLOBAL / WEAK / ...
    kind: str  # FUNC / OBJECT / NOTYPE / ...
    demangled: str = ""

    @property
    def display(self) -> str:
        return self.demangled or self.name


def read_dynamic_symbols(path: str | Path) -> list[DynamicSymbol]:
    """Every symbol of the ELF ``.dynsym`` table (the null symbol excluded), not demangled."""
    return read_symbols(path, (_SHT_DYNSYM,))


def read_symbols(path: str | Path, tables: tuple[int, ...] = (_SHT_SYMTAB, _SHT_DYNSYM)) -> list[DynamicSymbol]:
    """Every symbol of the ELF symbol tables of these section types (default: ``.symtab``, which
    has the local ones too where the file is not stripped, and ``.dynsym``), not demangled."""
    data = Path(path).read_bytes()
    if len(data) < 52 or data[:4] != b"\x7fELF":
        raise ElfError(f"{path}: not an ELF file")
    cls, enc = data[4], data[5]
    if cls not in (1, 2) or enc not in (1, 2):
        raise ElfError(f"{path}: unsupported ELF class/encoding {cls}/{enc}")
    end = "<" if enc == 1 else ">"
    is64 = cls == 2
    try:
        if is64:
            shoff, = struct.unpack_from(end + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        else:
            shoff, = struct.unpack_from(end + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        if shoff == 0 or shnum == 0:
            raise ElfError(f"{path}: no section headers (stripped beyond .dynsym?)")
        sections = []
        for i in range(shnum):
            off = shoff + i * shentsize
            if is64:
                (_n, typ, _f, _a, s_off, s_size, link, _i, _al, entsize) = struct.unpack_from(
                    end + "IIQQQQIIQQ", data, off)
            else:
                (_n, typ, _f, _a, s_off, s_size, link, _i, _al, entsize) = struct.unpack_from(
                    end + "IIIIIIIIII", data, off)
            sections.append((typ, s_off, s_size, link, entsize))
        symbols: list[DynamicSymbol] = []
        for typ, s_off, s_size, link, entsize in sections:
            if typ not in tables:
                continue
            _st, str_off, str_size, _l, _e = sections[link]
            strtab = data[str_off:str_off + str_size]
            entsize = entsize or (24 if is64 else 16)
            for k in range(1, s_size // entsize):
                o = s_off + k * entsize
                if is64:
                    st_name, st_info, _other, st_shndx, _v, _s = struct.unpack_from(
                        end + "IBBHQQ", data, o)
                else:
                    st_name, _v, _s, st_info, _other, st_shndx = struct.unpack_from(
                        end + "IIIBBH", data, o)
                stop = strtab.find(b"\0", st_name)
                name = strtab[st_name:stop if stop >= 0 else None].decode("utf-8", "replace")
                if not name:
                    continue
                symbols.append(DynamicSymbol(
                    name=name,
                    defined=st_shndx != 0,
                    binding=_STB.get(st_info >> 4, str(st_info >> 4)),
                    kind=_STT.get(st_info & 0xF, str(st_info & 0xF)),
                ))
        return symbols
    except (struct.error, IndexError) as exc:
        raise ElfError(f"{path}: truncated or malformed ELF ({exc})") from exc


def demangle(names: list[str]) -> dict[str, str]:
    """``{mangled: demangled}`` for the C++ names among ``names`` (c++filt; {} without it)."""
    return _demangle(names)


def _demangle(names: list[str]) -> dict[str, str]:
    """Demangle C++ names with c++filt if it is installed; otherwise return {}."""
    mangled = [n for n in names if n.startswith("_Z")]
    exe = shutil.which("c++filt")
    if not mangled or exe is None:
        return {}
    try:
        out = subprocess.run([exe], input="\n".join(mangled), capture_output=True, text=True,
                             timeout=30, check=True).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(zip(mangled, out, strict=False)) if len(out) == len(mangled) else {}


@dataclass(frozen=True)
class _SymRule:
    guard: str
    pattern: re.Pattern[str]  # matched against the plain and the demangled name
    reason: str


def _r(guard: str, pattern: str, reason: str) -> _SymRule:
    return _SymRule(guard, re.compile(pattern), reason)


_IMPORT_RULES: tuple[_SymRule, ...] = (
    _r("side_stream", r"^(cudaStreamCreate\w*|cuStreamCreate\w*|cublasSetStream\w*|"
       r"cublasLtSetStream\w*|cudnnSetStream|cudaLaunchHostFunc|cuLaunchHostFunc|"
       r"cudaStreamAddCallback|cuStreamAddCallback)$|getStreamFromExternal",
       # Not getStreamFromPool or setCurrentCUDAStream: torch's CUDA headers (CUDAContext.h,
       # CUDAGuard.h) emit inline helpers that import them in honest extensions; the source
       # check catches explicit calls.
       "creates or switches CUDA streams; work on a side stream escapes the timer"),
    _r("host_thread", r"^(pthread_create|thrd_create|clone|clone3)$|^_ZNSt6thread|^_ZNSt7jthread|"
       r"std::thread::|std::jthread::|boost::thread",
       "starts host threads that can outlive the timed call"),
    _r("cuda_graph", r"^(cudaGraph\w*|cuGraph\w*|cudaStreamBeginCapture\w*|cudaStreamEndCapture|"
       r"cuStreamBeginCapture\w*|cuStreamEndCapture)$|at::cuda::CUDAGraph",
       "uses CUDA graphs"),
    _r("l2_persistence", r"^(cudaDeviceSetLimit|cudaStreamSetAttribute|cudaCtxResetPersistingL2Cache|"
       r"cuCtxSetLimit|cuStreamSetAttribute|cudaGraphKernelNodeSetAttribute|"
       r"cuCtxResetPersistingL2Cache)$",
       "can configure persisting L2 cache, keeping data hot across timed calls"),
    _r("dynamic_code", r"^(dlopen|dlsym|dlvsym|dlmopen|cudaGetDriverEntryPoint\w*|"
       r"cuGetProcAddress\w*)$",
       "looks functions up at run time; the import table no longer shows what it calls"),
    _r("process_abuse", r"^(fork|vfork|execve|execv|execvp|execvpe|execl|execle|execlp|fexecve|"
       r"system|popen|posix_spawn|posix_spawnp|kill|killpg|ptrace)$",
       "starts, replaces or signals processes (fork/exec/kill)"),
    _r("process_exit", r"^(_exit|_Exit|quick_exit|prctl|setrlimit|prlimit|prlimit64|sigaction|"
       r"signal|cudaDeviceReset|cuCtxDestroy\w*|cuDevicePrimaryCtxReset\w*)$",
       "ends or reconfigures the worker process (exit/signals/limits/context reset)"),
    _r("network", r"^(socket|connect|bind|listen|accept|accept4|getaddrinfo|gethostbyname\w*|"
       r"curl_\w+)$", "network access"),
    _r("filesystem", r"^(mkfifo|mknod|unlink|unlinkat|remove|rename|renameat|rmdir|chmod|chown|"
       r"truncate|symlink|link)$", "destructive filesystem operation"),
    _r("file_access", r"^(shm_open|fopen64|open64|creat|creat64|memfd_create)$",
       "touches files or shared memory"),
)

# Names an extension must never define itself: the timer, synchronisation, loader and clock.
_INTERPOSE_C = re.compile(
    r"^(cuda(EventElapsedTime|EventRecord\w*|EventSynchronize|EventQuery|EventCreate\w*|"
    r"DeviceSynchronize|StreamSynchronize|StreamQuery|StreamWaitEvent|LaunchKernel\w*|Memcpy\w*|"
    r"Malloc\w*|Free\w*|GetLastError|PeekAtLastError)|"
    r"cu(EventElapsedTime\w*|EventRecord\w*|EventSynchronize|CtxSynchronize|StreamSynchronize|"
    r"LaunchKernel\w*|GetProcAddress\w*)|"
    r"clock_gettime|__clock_gettime|gettimeofday|time|clock|timespec_get|nanosleep|"
    r"dlopen|dlsym|dlvsym|pthread_create|memcmp|bcmp|__libc_start_main|"
    r"(cublas|cudnn|nccl|nvrtc|cufft|curand|cusparse|cusolver)[A-Z_]\w*|"
    r"Py[A-Z_]\w*|_Py\w+)$"
)
_INTERPOSE_CXX = re.compile(
    r"^(torch|at|c10|caffe2|pybind11)::"
)


def check_extension_symbols(
    so_path: str | Path,
    policy: GuardPolicy = GuardPolicy(),  # noqa: B008 - frozen dataclass, immutable default
) -> list[Finding]:
    """Check the dynamic symbols of a built extension (``.so``). Raises ElfError if unreadable.

    Returns ALL findings, each with ``blocking`` set for ``policy`` (symbol interposition,
    fork/exec/kill, sockets and destructive file operations block; streams, threads and CUDA
    graphs block only where the policy forbids them; the rest is evidence).

    Imports: streams, threads, CUDA graphs, L2 persistence, dlopen/dlsym, fork/exec/signals,
    sockets. Exports: any definition that could interpose on the CUDA runtime/driver, libc
    clocks, the loader, Python, or a non-inline torch/ATen/c10 function (``symbol_interposition``).
    OpenMP (GOMP_*, omp_*) is allowed.
    """
    path = Path(so_path)
    symbols = read_dynamic_symbols(path)
    demangled = _demangle([s.name for s in symbols])
    findings: list[Finding] = []
    seen: set[tuple[str, str]] = set()

    def add(guard: str, text: str) -> None:
        if (guard, text) not in seen:
            seen.add((guard, text))
            findings.append(Finding(guard, text, None, policy.blocks(guard)))

    for sym in symbols:
        plain = sym.name.split("@")[0]
        pretty = demangled.get(sym.name, "")
        shown = pretty or plain
        if not sym.defined:
            for rule in _IMPORT_RULES:
                if rule.pattern.search(plain) or (pretty and rule.pattern.search(pretty)):
                    add(rule.guard, f"{path.name} imports `{shown}`: {rule.reason}")
            continue
        if sym.kind not in ("FUNC", "IFUNC", "OBJECT", "NOTYPE"):
            continue
        if _INTERPOSE_C.match(plain) and not plain.startswith("PyInit_"):
            add("symbol_interposition",
                f"{path.name} defines `{plain}` ({sym.binding} {sym.kind}): it can interpose on "
                "the real function the timer/harness/runtime uses")
        elif pretty and sym.binding == "GLOBAL" and sym.kind in ("FUNC", "IFUNC") \
                and _INTERPOSE_CXX.match(pretty):
            add("symbol_interposition",
                f"{path.name} defines non-inline `{pretty[:120]}` in a torch/ATen/c10 namespace: "
                "it can interpose on the library's own function")
    return findings
