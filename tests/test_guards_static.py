"""Tests for the static guards (evalfarm.guards): AST checks, C++ string checks, ELF symbols."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from evalfarm.guards import (
    DEFAULT_POLICY,
    ROLES,
    CandidateSyntaxError,
    ElfError,
    Finding,
    GuardPolicy,
    blocking,
    check_candidate_source,
    check_cpp_source,
    check_extension_symbols,
    read_dynamic_symbols,
    static_checks,
)
from evalfarm.guards.rules import MODULES


def _compiles(src: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(src, "<gen>", "exec")
        except (SyntaxError, ValueError):
            return False
    return True


CASES = Path(__file__).parent / "adversarial" / "static"


def _expected(path: Path) -> str:
    for line in path.read_text().splitlines()[:5]:
        if line.startswith("# expect:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{path.name} has no '# expect:' header")


def _guards(findings: list[Finding]) -> set[str]:
    return {f.guard for f in findings}


def _blocking(findings: list[Finding]) -> set[str]:
    return {f.guard for f in blocking(findings)}


HONEST_POLICY = GuardPolicy.from_name("honest")
PAPER = GuardPolicy.from_name("paper")


def _check(src: str, **kw: object) -> list[Finding]:
    return check_candidate_source(textwrap.dedent(src), **kw)  # type: ignore[arg-type]


ADVERSARIAL = sorted(p for p in CASES.glob("*.py") if _expected(p) != "none")
HONEST = sorted(p for p in CASES.glob("*.py") if _expected(p) == "none")


def test_corpus_is_complete() -> None:
    wanted = {
        "side_stream", "host_thread", "cuda_graph", "timer_patch", "comparator_patch",
        "harness_access", "global_state", "reduced_precision", "caching", "lazy_output",
        "process_abuse", "filesystem", "network", "dynamic_code", "seed_access", "monkeypatch",
        "l2_persistence", "symbol_interposition", "interpreter_access", "process_exit",
        "file_access",
    }
    assert wanted <= {_expected(p) for p in ADVERSARIAL}
    assert len(HONEST) >= 11
    for p in ADVERSARIAL:
        assert p.name.startswith(_expected(p) + "_"), p.name


@pytest.mark.parametrize("path", ADVERSARIAL, ids=lambda p: p.stem)
def test_adversarial_candidate_is_flagged(path: Path) -> None:
    findings = check_candidate_source(path.read_text())
    guard = _expected(path)
    assert guard in _guards(findings), f"{path.name}: {findings}"
    for f in findings:
        assert f.reason.strip()
        if f.line is not None:
            assert f.reason.startswith(f"line {f.line}: ")


# What each adversarial fixture blocks on by itself; everything else it fires testifies.
BLOCKS_UNDER_HONEST = {
    "filesystem_rmtree": {"filesystem"},
    "harness_access_builtins": {"harness_access"},
    "harness_access_frames": {"harness_access"},
    "harness_access_gc_sys_modules": {"harness_access"},
    "network_socket": {"network"},
    "process_abuse_exit": {"process_abuse"},
    "symbol_interposition_cpp": {"symbol_interposition"},
}
# paper adds the policy-role rules: reduced precision, side streams, host threads, CUDA graphs.
BLOCKS_UNDER_PAPER = BLOCKS_UNDER_HONEST | {
    "cuda_graph_compile_reduce_overhead": {"cuda_graph"},
    "cuda_graph_replay": {"cuda_graph"},
    "global_state_cudnn_tf32": {"reduced_precision"},
    "host_thread_cpp_std_thread": {"host_thread"},
    "host_thread_dunder_import": {"host_thread"},
    "host_thread_import_alias": {"host_thread"},
    "host_thread_importlib": {"host_thread"},
    "reduced_precision_cuda_half": {"reduced_precision"},
    "reduced_precision_half": {"reduced_precision"},
    "side_stream_alias_from_import": {"side_stream"},
    "side_stream_cpp_pool": {"side_stream"},
    "side_stream_cuda_create": {"side_stream"},
    "side_stream_getattr_string": {"side_stream"},
}


@pytest.mark.parametrize("path", ADVERSARIAL, ids=lambda p: p.stem)
def test_adversarial_blocking_by_policy(path: Path) -> None:
    src = path.read_text()
    honest = check_candidate_source(src)
    assert _blocking(honest) == BLOCKS_UNDER_HONEST.get(path.stem, set()), honest
    assert _blocking(check_candidate_source(src, HONEST_POLICY)) == _blocking(honest)
    assert _blocking(check_candidate_source(src, GuardPolicy.from_name("permissive"))) == \
        _blocking(honest)
    paper = check_candidate_source(src, PAPER)
    assert _blocking(paper) == BLOCKS_UNDER_PAPER.get(path.stem, set()), paper
    assert _guards(paper) == _guards(honest)  # the evidence does not depend on the policy


# Honest fixtures: what they are still reported for (evidence, or an optional behaviour);
# all others have no finding at all.
HONEST_EVIDENCE = {
    "honest_ctypes_libcuda": {"interpreter_access"},
    "honest_fp16_intermediates": {"reduced_precision"},
    "honest_cuda_graph_static_buffers": {"side_stream", "cuda_graph"},
}
# Only policy-role rules may block an honest fixture, and only under paper.
HONEST_BLOCKS_UNDER_PAPER = {
    "honest_fp16_intermediates": {"reduced_precision"},
    "honest_cuda_graph_static_buffers": {"side_stream", "cuda_graph"},
}


@pytest.mark.parametrize("path", HONEST, ids=lambda p: p.stem)
def test_honest_candidate_is_not_blocked(path: Path) -> None:
    src = path.read_text()
    findings = check_candidate_source(src)
    assert _guards(findings) == HONEST_EVIDENCE.get(path.stem, set()), findings
    assert blocking(findings) == []
    assert blocking(check_candidate_source(src, GuardPolicy.from_name("permissive"))) == []
    paper = check_candidate_source(src, PAPER)
    assert _blocking(paper) == HONEST_BLOCKS_UNDER_PAPER.get(path.stem, set()), paper
    assert all(ROLES[g].role == "policy" for g in _blocking(paper))


def test_roles_table_covers_every_rule() -> None:
    declared = {g for m in MODULES for g in getattr(m, "RULE_IDS", ())}
    assert declared == set(ROLES)
    assert {r.role for r in ROLES.values()} == {"blocks", "policy", "testifies"}
    for guard, role in ROLES.items():
        assert (role.flag is not None) == (role.role == "policy"), guard
        if role.flag is not None:
            assert role.flag in GuardPolicy.__dataclass_fields__


def test_finding_to_dict_and_compat_module() -> None:
    (f,) = check_candidate_source("import socket\n")
    assert f.to_dict() == {"guard": "network", "reason": "line 1: imports socket: network access",
                           "line": 1, "blocking": True}
    assert static_checks.check_candidate_source is check_candidate_source
    assert static_checks.Finding is Finding and static_checks.blocking is blocking
    assert static_checks.CandidateSyntaxError is CandidateSyntaxError


# ---- aliasing / evasion variants -----------------------------------------------------------


@pytest.mark.parametrize(
    "src",
    [
        "import torch as t\ns = t.cuda.Stream()\n",
        "from torch import cuda\ns = cuda.Stream()\n",
        "from torch.cuda import Stream as S\ns = S()\n",
        "import torch\nS = torch.cuda.Stream\nS2 = S\ns = S2()\n",
        "import torch\ns = getattr(torch.cuda, 'Stream')()\n",
        "import torch\ns = getattr(getattr(torch, 'cu' + 'da'), 'Stream')()\n",
        "t = __import__('torch')\ns = t.cuda.ExternalStream(0)\n",
        "import importlib\ntc = importlib.import_module('torch.cuda')\ns = tc.Stream()\n",
        "import sys\ns = sys.modules['torch'].cuda.Stream()\n",
        "import torch\nwith torch.cuda.stream(None):\n    pass\n",
        "import torch\ntorch.cuda.set_stream(x)\n",
        "from torch.cuda.streams import Stream\n",
        "import cupy as cp\ns = cp.cuda.Stream(non_blocking=True)\n",
    ],
)
def test_side_stream_aliases(src: str) -> None:
    findings = check_candidate_source(src)
    assert "side_stream" in _guards(findings), findings


def test_side_stream_line_number() -> None:
    src = "import torch\n\n\nclass ModelNew:\n    def forward(self, x):\n        s = torch.cuda.Stream()\n"
    (f,) = [f for f in check_candidate_source(src) if f.guard == "side_stream"]
    assert f.line == 6
    assert f.reason.startswith("line 6: torch.cuda.Stream")


@pytest.mark.parametrize(
    ("src", "guard"),
    [
        ("import threading as th\nth.Thread(target=f).start()\n", "host_thread"),
        ("import _thread\n", "host_thread"),
        ("from concurrent.futures import ThreadPoolExecutor as P\n", "host_thread"),
        ("import os\npid = os.fork()\n", "process_abuse"),
        ("import asyncio\n", "host_thread"),
        ("import os\nos.system('nvidia-smi')\n", "process_abuse"),
        ("import subprocess as sp\nsp.run(['ls'])\n", "process_abuse"),
        ("import sys\nsys.exit(0)\n", "process_exit"),
        ("raise SystemExit(0)\n", "process_exit"),
        ("quit()\n", "process_exit"),
        ("import resource\nresource.setrlimit(1, (0, 0))\n", "process_exit"),
        ("import torch\ntorch.Tensor.allclose = lambda *a: True\n", "comparator_patch"),
        ("import torch\nsetattr(torch, 'allclose', lambda *a, **k: True)\n", "comparator_patch"),
        ("import torch\nsetattr(torch.Tensor, '__eq__', f)\n", "comparator_patch"),
        ("import numpy as np\nnp.testing.assert_allclose = f\n", "comparator_patch"),
        ("import torch\ntorch.cuda.__dict__['synchronize'] = f\n", "timer_patch"),
        ("import torch\ndel torch.cuda.Event.elapsed_time\n", "timer_patch"),
        ("import time\ntime.perf_counter_ns = f\n", "timer_patch"),
        ("import torch\nobject.__setattr__(torch.cuda, 'synchronize', f)\n", "timer_patch"),
        ("import torch\nsetattr(torch.cuda, name, f)\n", "monkeypatch"),
        ("import torch\nvars(torch)['matmul'] = f\n", "monkeypatch"),
        ("import torch\ntorch.matmul = f\n", "monkeypatch"),
        ("import sys\nsys.settrace(f)\n", "harness_access"),
        ("import sys\nsys.stdout = open('x')\n", "interpreter_access"),
        ("import gc\nrefs = gc.get_referrers(x)\n", "harness_access"),
        ("import inspect\nst = inspect.stack()\n", "harness_access"),
        ("g = f.__globals__\n", "interpreter_access"),
        ("cls = ().__class__.__base__.__subclasses__()\n", "harness_access"),
        ("import __main__\n", "harness_access"),
        ("b = __builtins__\n", "interpreter_access"),
        ("from ctypes import CDLL\n", "interpreter_access"),
        ("import torch\ntorch.backends.cudnn.deterministic = True\n", "global_state"),
        ("import torch\ntorch.set_float32_matmul_precision('high')\n", "global_state"),
        ("import torch\ntorch.use_deterministic_algorithms(True)\n", "global_state"),
        ("import torch\ntorch.set_default_dtype(torch.float64)\n", "global_state"),
        ("import torch\ntorch.set_flush_denormal(True)\n", "global_state"),
        ("import os\nos.environ.update({'A': '1'})\n", "global_state"),
        ("from os import environ\nenviron['A'] = '1'\n", "global_state"),
        ("import torch\ntorch.set_grad_enabled(True)\n", "global_state"),
        ("import torch\ntorch._C._set_cublas_allow_tf32(True)\n", "global_state"),
        ("exec('x = 1')\n", "dynamic_code"),
        ("import marshal\n", "dynamic_code"),
        ("import pickle\nobj = pickle.loads(b)\n", "dynamic_code"),
        ("import importlib\nm = importlib.import_module(name)\n", "dynamic_code"),
        ("import torch\nf = getattr(torch, 'ma' + suffix)\n", "dynamic_code"),
        ("code = compile('1', 'f', 'eval')\n", "dynamic_code"),
        ("import codecs\ns = codecs.decode('vzcbeg bf', 'rot13')\n", "dynamic_code"),
        ("from torch.utils.cpp_extension import load_inline\n"
         "m = load_inline(name='x', cpp_sources=open('k.cpp').read())\n", "dynamic_code"),
        ("import torch\ns = torch.initial_seed()\n", "seed_access"),
        ("import torch\ns = torch.cuda.get_rng_state()\n", "seed_access"),
        ("import numpy as np\ns = np.random.get_state()\n", "seed_access"),
        ("import random\ns = random.getstate()\n", "seed_access"),
        ("import torch\nclass P(torch.nn.Parameter):\n    pass\n", "lazy_output"),
        ("import torch\nclass T(torch._C.TensorBase):\n    pass\n", "lazy_output"),
        ("import torch\ny = torch.Tensor._make_subclass(C, x)\n", "lazy_output"),
        ("from torch.utils._python_dispatch import TorchDispatchMode\n", "lazy_output"),
        ("def __torch_dispatch__(cls, func, types, args, kwargs):\n    pass\n", "lazy_output"),
        ("x.__class__ = Fake\n", "lazy_output"),
        ("import urllib.request\n", "network"),
        ("import requests\n", "network"),
        ("import tempfile\n", "file_access"),
        ("from pathlib import Path\nPath('/tmp/x').write_text('1')\n", "file_access"),
        ("f = open('/tmp/out.txt', mode='a')\n", "file_access"),
        ("f = open('/dev/shm/x')\n", "file_access"),
        ("import torch\nref = torch.load('answers.pt')\n", "file_access"),
        ("import torch\nlib = torch.library.Library('aten', 'IMPL')\n", "monkeypatch"),
        ("import shutil\nshutil.rmtree('/tmp/x')\n", "filesystem"),
        ("import os\nos.unlink('/tmp/x')\n", "filesystem"),
        ("from pathlib import Path\nPath('/tmp/x').unlink()\n", "filesystem"),
        ("import os\nos.makedirs('/tmp/build', exist_ok=True)\n", "file_access"),
        ("import os\nos._exit(0)\n", "process_exit"),
        ("import signal\nsignal.signal(15, h)\n", "process_exit"),
        ("import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n", "process_abuse"),
        ("import pty\n", "process_abuse"),
        ("import sys\nm = sys.modules['evalfarm.judge']\n", "harness_access"),
        ("import sys\nsys.addaudithook(f)\n", "harness_access"),
        ("import sys\nsys.meta_path.insert(0, f)\n", "harness_access"),
        ("import builtins\nbuiltins.open = f\n", "harness_access"),
        ("import pytest\n", "harness_access"),
        ("import weakref\n", "interpreter_access"),
        ("import gc\ngc.disable()\n", "interpreter_access"),
        ("import sys\nsys.setrecursionlimit(10**6)\n", "interpreter_access"),
        ("import tracemalloc\n", "interpreter_access"),
    ],
)
def test_python_guards(src: str, guard: str) -> None:
    findings = check_candidate_source(src)
    assert guard in _guards(findings), findings
    assert all(f.blocking == PAPER.blocks(f.guard) for f in check_candidate_source(src, PAPER))
    for f in findings:
        assert f.blocking == (ROLES[f.guard].role == "blocks")


@pytest.mark.parametrize(
    "src",
    [
        "import ctypes\nlib = ctypes.CDLL('libcuda.so.1')\nctypes.string_at(0)\n",
        "import weakref\nimport tracemalloc\nimport gc\ngc.disable()\n",
        "import sys\nsys.setrecursionlimit(10000)\n",
        "import sys\nsys.exit(1)\n",
        "import atexit, faulthandler, signal, resource\n",
        "import tempfile, os\nd = tempfile.mkdtemp()\nos.makedirs(d + '/b', exist_ok=True)\n",
        "import torch\nw = torch.load('w.pt')\n",
        "import torch\ntorch.matmul = f\ntorch.cuda.synchronize = g\n",
        "import time\ntime.perf_counter = f\n",
    ],
)
def test_testimony_does_not_block(src: str) -> None:
    for policy in (HONEST_POLICY, PAPER, GuardPolicy.from_name("strict")):
        findings = check_candidate_source(src, policy)
        assert findings and blocking(findings) == [], findings


def test_open_for_reading_is_not_flagged() -> None:
    assert check_candidate_source("with open('config.json') as f:\n    data = f.read()\n") == []


def test_shadowed_builtin_is_not_flagged() -> None:
    src = "def compile(x):\n    return x\n\ny = compile(3)\n"
    assert check_candidate_source(src) == []


def test_self_eval_and_re_compile_are_not_dynamic_code() -> None:
    src = """
    import re
    import torch.nn as nn
    PAT = re.compile("a+")
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.eval()
        def forward(self, x):
            return x
    """
    assert _check(src) == []


# ---- caching -------------------------------------------------------------------------------

_MODEL = """
import functools
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))
        self.cache = {{}}
        self.buf = None

    def forward(self, x):
{body}
"""


def _forward(body: str) -> list[Finding]:
    return check_candidate_source(_MODEL.format(body=textwrap.indent(textwrap.dedent(body), " " * 8)))


@pytest.mark.parametrize(
    "body",
    [
        "key = id(x)\nif key in self.cache:\n    return x\nreturn x",
        "h = hash(x)\nout = self.cache.get(h)\nreturn x",
        "p = x.untyped_storage().data_ptr()\nif p == self.buf:\n    return x\nreturn x",
        "v = x._version\nif (v, 1) in self.cache:\n    return x\nreturn x",
        "fp = x.abs().max().item()\nif fp in self.cache:\n    return x\nreturn x",
        "self.last_ptr = x.data_ptr()\nreturn x",
        "self.last_input = x\nreturn x",
        "out = x * 2\nself.last_out = out\nreturn out",
        "self.cache.setdefault(1, x)\nreturn x",
        "self.cache.update({1: x})\nreturn x",
        "self.hist = [x]\nreturn x",
        "self.buf = torch.empty_like(x)\nreturn self.buf",
        "self.buf = torch.empty_like(x)\nreturn self.buf.view(-1)",
        "return self.w",
        "setattr(self, 'prev', x)\nreturn x",
    ],
)
def test_caching_in_forward(body: str) -> None:
    findings = _forward(body)
    assert "caching" in _guards(findings), findings


@pytest.mark.parametrize(
    "body",
    [
        "out = torch.empty_like(x)\ntorch.mul(x, self.w, out=out)\nreturn out",
        "self.buf = torch.empty_like(x)\ny = x + 1\nreturn y",  # per-call workspace, not returned
        "self.n = 0\nself.n += 1\nreturn x * self.w",
        "shape = x.shape\nself.last_shape = x.shape\nreturn x.reshape(shape)",
        "local = {}\nlocal['a'] = x\nreturn local['a']",
        "self.hist = []\nreturn x",
        "assert x.data_ptr() % 16 == 0\nreturn x",
        "ok = (x.data_ptr() & 15) == 0\nreturn x if ok else x.clone()",
        "v = x._version\nreturn x + v",
        "s = x.abs().max().item()\nreturn x / s",
        "self._wt = self.w.t().contiguous()\nreturn x * self._wt",
        "self.w2 = self.w.to(x.device, non_blocking=True)\nreturn x * self.w2",
        "if self.w._version != self.buf:\n    self.buf = self.w._version\nreturn x * self.w",
        "self.cache[x.shape] = torch.empty_like(x)\nreturn x",
    ],
)
def test_no_caching_false_positive(body: str) -> None:
    assert _forward(body) == []


def test_lru_cache_on_zero_arg_builder_is_allowed() -> None:
    src = """
    import functools
    from torch.utils.cpp_extension import load_inline

    @functools.lru_cache(maxsize=None)
    def _module():
        return load_inline(name="m", cpp_sources="int f(int a){return a;}", functions=["f"])
    """
    assert _check(src) == []


def test_caching_only_in_forward_path() -> None:
    src = """
    import torch.nn as nn
    class ModelNew(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.table = {}
            self.table[0] = n
            self.sizes = [n]
            self.sizes.append(n)
        def forward(self, x):
            return x
    """
    assert _check(src) == []


# ---- reduced precision & the reference exemption ---------------------------------------------


HALF_CANDIDATE = """
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a.half(), b.to(dtype=torch.float16)).float()
"""


def test_reduced_precision_blocks_under_paper_without_reference() -> None:
    findings = _check(HALF_CANDIDATE, policy=PAPER)
    assert _guards(findings) == {"reduced_precision"}
    assert len(findings) == 2 and all(f.blocking for f in findings)


def test_reduced_precision_allowed_when_reference_uses_half() -> None:
    ref = "import torch\ndef get_inputs():\n    return [torch.randn(8, 8, dtype=torch.float16)]\n"
    assert _check(HALF_CANDIDATE, reference_source=ref, policy=PAPER) == []
    # fp32 reference: still blocked under paper; bf16 reference does not excuse fp16
    assert blocking(_check(HALF_CANDIDATE, reference_source="x = torch.randn(4)", policy=PAPER))
    assert blocking(_check(HALF_CANDIDATE, reference_source="x = torch.randn(4, dtype=torch.bfloat16)",
                           policy=PAPER))


def test_reduced_precision_policy_allows() -> None:
    for policy in (GuardPolicy(allow_reduced_precision=True), HONEST_POLICY):
        findings = _check(HALF_CANDIDATE, policy=policy)
        assert _guards(findings) == {"reduced_precision"}  # still reported, as evidence
        assert blocking(findings) == []


def test_tf32_is_global_state_and_precision() -> None:
    src = "import torch\ntorch.backends.cudnn.allow_tf32 = True\n"
    assert _guards(check_candidate_source(src)) == {"global_state", "reduced_precision"}
    assert blocking(check_candidate_source(src)) == []
    assert _blocking(check_candidate_source(src, PAPER)) == {"reduced_precision"}


@pytest.mark.parametrize(
    "snippet",
    ["__nv_bfloat16 v;", "half2 h;", "wmma::fragment<wmma::matrix_a, 16, 16, 16, half> a;",
     'asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 ...");', "auto t = x.to(torch::kHalf);"],
)
def test_reduced_precision_in_cuda_strings(snippet: str) -> None:
    src = f'from torch.utils.cpp_extension import load_inline\nk = load_inline("n", "", """{snippet}""")\n'
    assert "reduced_precision" in _guards(check_candidate_source(src))
    assert "reduced_precision" in _blocking(check_candidate_source(src, PAPER))


def test_cpp_comments_and_current_stream_are_not_flagged() -> None:
    src = '''
    cuda_src = """
    #include <ATen/cuda/CUDAContext.h>
    // we do not call cudaStreamCreate or std::thread here
    /* nor cudaGraphLaunch */
    void run() { auto s = at::cuda::getCurrentCUDAStream(); int half = 4; }
    """
    '''
    assert _check(src) == []


def test_cpp_string_literal_does_not_hide_code() -> None:
    text = 'const char* url = "http://x"; cudaStreamCreate(&s); /* c */ char q = \'"\'; std::thread t;'
    assert {f.guard for f in check_cpp_source(text)} == {"side_stream", "host_thread"}
    assert check_cpp_source("/* cudaStreamCreate */ // std::thread\nint x;") == []


def test_cpp_source_split_across_python_concatenation() -> None:
    src = """
    from torch.utils.cpp_extension import load_inline
    A = "#include <torch/extension.h>\\nvoid f() { cudaStream"
    B = "Create(&s); }"
    m = load_inline(name="x", cpp_sources="", cuda_sources=A + B)
    """
    findings = _check(src)
    assert "side_stream" in _guards(findings), findings


# ---- policies ------------------------------------------------------------------------------


def test_policy_names() -> None:
    assert GuardPolicy.NAMES == ("honest", "paper", "strict", "permissive")
    assert DEFAULT_POLICY == "honest"
    assert GuardPolicy.from_name(DEFAULT_POLICY) == GuardPolicy()
    assert GuardPolicy.from_name("PERMISSIVE") == GuardPolicy.from_name("honest")
    honest = GuardPolicy.from_name("honest")
    assert all(getattr(honest, f) for f in GuardPolicy.__dataclass_fields__)
    paper = GuardPolicy.from_name("paper")
    assert paper.allow_torch_ops and paper.allow_triton
    assert not (paper.allow_reduced_precision or paper.allow_streams or paper.allow_threads
                or paper.allow_cuda_graphs)
    strict = GuardPolicy.from_name("strict")
    assert strict == GuardPolicy(**{**paper.__dict__, "allow_torch_ops": False})
    for name in GuardPolicy.NAMES:
        GuardPolicy.from_name(name)
    with pytest.raises(ValueError, match="unknown guard policy"):
        GuardPolicy.from_name("lenient")


def test_policy_flags_decide_blocking() -> None:
    src = "import threading\nimport torch\ns = torch.cuda.Stream()\ng = torch.cuda.CUDAGraph()\n"
    expected = {"host_thread", "side_stream", "cuda_graph"}
    assert _guards(check_candidate_source(src)) == expected
    assert blocking(check_candidate_source(src)) == []
    assert _blocking(check_candidate_source(src, PAPER)) == expected
    only_threads = GuardPolicy(**{**PAPER.__dict__, "allow_threads": True})
    assert _blocking(check_candidate_source(src, only_threads)) == {"side_stream", "cuda_graph"}


def test_blocks_rules_block_under_every_policy() -> None:
    src = "import sys\nimport torch\ntorch.cuda.synchronize = lambda: None\nf = sys._getframe(1)\n"
    for name in GuardPolicy.NAMES:
        findings = check_candidate_source(src, GuardPolicy.from_name(name))
        assert _guards(findings) == {"timer_patch", "harness_access"}
        assert _blocking(findings) == {"harness_access"}


def test_triton_policy() -> None:
    src = (CASES / "honest_triton_kernel.py").read_text()
    assert check_candidate_source(src) == []
    assert "triton" in _blocking(check_candidate_source(src, GuardPolicy(allow_triton=False)))


STRICT_OK = """
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
mod = load_inline(name="k", cpp_sources="torch::Tensor mm(torch::Tensor a, torch::Tensor b);",
                  functions=["mm"])
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = mod
    def forward(self, a, b):
        a = a.contiguous().view(a.shape[0], -1)
        out = torch.empty(a.shape[0], b.shape[1], device=a.device)
        n = (a.shape[0] + 127) // 128
        return self.k.mm(a, b) if n else mod.mm(a, b)
"""


def test_strict_allows_custom_kernels_and_helpers() -> None:
    assert _check(STRICT_OK, policy=GuardPolicy.from_name("strict")) == []


@pytest.mark.parametrize(
    "expr",
    ["torch.matmul(a, b)", "a @ b", "F.relu(a)", "a.sum()", "a + b", "a * 2.0", "torch.cat([a, b])"],
)
def test_strict_flags_torch_ops(expr: str) -> None:
    src = f"""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    class ModelNew(nn.Module):
        def forward(self, a, b):
            return {expr}
    """
    assert _blocking(_check(src, policy=GuardPolicy.from_name("strict"))) == {"torch_op"}
    assert _check(src) == []  # honest and paper allow PyTorch ops: not even reported
    assert _check(src, policy=PAPER) == []


# ---- syntax errors & robustness --------------------------------------------------------------


def test_syntax_error_raises_clear_value_error() -> None:
    with pytest.raises(CandidateSyntaxError, match=r"line 2: candidate is not valid Python"):
        check_candidate_source("x = 1\ndef f(:\n")
    with pytest.raises(ValueError):
        check_candidate_source("x = '\0'\0")


_ATOMS = st.sampled_from([
    "x", "self", "torch", "torch.cuda", "t", "os", "sys", "np", "F", "threading", "0", "1.5",
    "'Stream'", "'synchronize'", "None", "[]", "{}", "x.data_ptr()", "getattr(torch, 'cuda')",
    "__import__('os')", "lambda: None", "self.cache", "id(x)", "'/dev/shm/a'", "open",
])
_ATTRS = st.sampled_from(["cuda", "Stream", "half", "synchronize", "Tensor", "__eq__", "modules",
                          "environ", "f_back", "data_ptr", "allclose", "x", "__dict__"])


@st.composite
def _expr(draw: st.DrawFn, depth: int = 0) -> str:
    kind = draw(st.integers(0, 5 if depth < 3 else 0))
    if kind == 0:
        return draw(_ATOMS)
    if kind == 1:
        return f"{draw(_expr(depth + 1))}.{draw(_ATTRS)}"
    if kind == 2:
        args = draw(st.lists(_expr(depth + 1), max_size=3))
        return f"{draw(_expr(depth + 1))}({', '.join(args)})"
    if kind == 3:
        return f"({draw(_expr(depth + 1))} {draw(st.sampled_from(['+', '@', '*', '%']))} " \
               f"{draw(_expr(depth + 1))})"
    if kind == 4:
        return f"{draw(_expr(depth + 1))}[{draw(_expr(depth + 1))}]"
    return f"[{draw(_expr(depth + 1))} for x in {draw(_expr(depth + 1))}]"


@st.composite
def _stmt(draw: st.DrawFn) -> str:
    e = draw(_expr())
    target = draw(st.sampled_from(["y", "self.y", "torch.cuda.synchronize", "x[0]", "t.y",
                                   "os.environ['A']", "self.cache[id(x)]"]))
    return draw(st.sampled_from([
        f"{target} = {e}", e, f"import torch as t\n{target} = {e}", f"global y\ny = {e}",
        f"with {e} as z:\n    pass", f"del {target}", f"{target} += {e}", f"return {e}",
        f"for x in {e}:\n    {target} = x",
    ]))


@st.composite
def _program(draw: st.DrawFn) -> str:
    stmts = draw(st.lists(_stmt(), min_size=1, max_size=6))
    body = textwrap.indent("\n".join(stmts), " " * 8)
    header = draw(st.sampled_from(["import torch\n", "import torch, os, sys\nimport numpy as np\n",
                                   "from torch.cuda import *\n", ""]))
    return (f"{header}class ModelNew:\n    def helper(self, x):\n        pass\n"
            f"    def forward(self, x):\n{body}\n        self.helper(x)\n")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_program())
def test_never_raises_on_generated_programs(src: str) -> None:
    # e.g. `global y` after an assignment to y is a SyntaxError; not this test's subject
    assume(_compiles(src))
    findings = check_candidate_source(src)
    assert all(isinstance(f, Finding) and f.guard and f.reason for f in findings)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_never_raises_on_random_text(text: str) -> None:
    if not _compiles(text):
        with pytest.raises(CandidateSyntaxError):
            check_candidate_source(text)
        return
    check_candidate_source(text)


@pytest.mark.parametrize(
    "src",
    [
        "x = " + "(" * 90 + "1" + ")" * 90 + "\n" + "y = " + "-" * 5000 + "1\n",
        "x = " + "(" * 50_000 + "1" + ")" * 50_000 + "\n",
        "x = " + "-" * 50_000 + "1\n",
        "x = " + "[" * 150 + "]" * 150 + "\n" + "y = " + "not " * 3000 + "1\n",
        "x = 1" + " + 1" * 100_000 + "\n",
        "def f():\n" + "".join("    " * i + "if x:\n" for i in range(1, 99)) + "    " * 99 + "pass\n",
    ],
    ids=["mixed", "parens50k", "unary50k", "not3000", "sum100k", "ifs"],
)
def test_deeply_nested_source_does_not_crash(src: str) -> None:
    try:
        findings = check_candidate_source(src)
    except CandidateSyntaxError:
        return
    assert all(f.guard == "dynamic_code" and not f.blocking for f in findings)


@pytest.mark.parametrize(
    "unit",
    ["/*", '"\\', "'\\\"", "wmma::fragment<", "mma.sync", "time(", "std::thread(/*"],
)
def test_cpp_scan_is_linear(unit: str) -> None:
    import time

    # Hostile inputs (unclosed comments and strings, template openers): eight times the text must
    # take about eight times as long (a quadratic scan takes 64: the old regex took 44 s on 165 KB
    # of unclosed comments). The two sizes are timed alternately, five times each, and each side's
    # best is kept, so a burst of load hits both; the bound, 24, is three times the linear ratio
    # and well under the quadratic one, so a loaded machine does not flip it (the earlier bound of
    # twice the linear ratio failed once in a fresh clone: 8.3).
    def best_pair(fn, small_arg, large_arg) -> tuple[float, float]:
        small_times, large_times = [], []
        for _ in range(5):
            for arg, times in ((small_arg, small_times), (large_arg, large_times)):
                t0 = time.perf_counter()
                fn(arg)
                times.append(time.perf_counter() - t0)
        return max(min(small_times), 1e-4), min(large_times)

    def cpp(n: int) -> str:
        return unit * (n // len(unit))

    def py(n: int) -> str:
        return "from torch.utils.cpp_extension import load_inline\nm = load_inline('n', '', " + repr(cpp(n)) + ")\n"

    small = 1 << 14
    for fn, make in ((check_cpp_source, cpp), (check_candidate_source, py)):
        t_small, t_large = best_pair(fn, make(small), make(8 * small))
        assert t_large / t_small < 24.0, (fn.__name__, t_small, t_large)


# ---- ELF symbols ---------------------------------------------------------------------------

CC = shutil.which("gcc") or shutil.which("cc")
CXX = shutil.which("g++") or shutil.which("c++")
needs_cc = pytest.mark.skipif(CC is None or CXX is None, reason="no C/C++ compiler")


def _build(tmp_path: Path, name: str, code: str, cxx: bool = False,
           extra: tuple[str, ...] = ()) -> Path:
    src = tmp_path / (name + (".cpp" if cxx else ".c"))
    src.write_text(textwrap.dedent(code))
    out = tmp_path / f"lib{name}.so"
    cmd = [CXX if cxx else CC, "-shared", "-fPIC", "-O1", str(src), "-o", str(out),
           "-Wl,--unresolved-symbols=ignore-all", *extra]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)  # type: ignore[list-item]
    return out


@needs_cc
def test_clean_library_has_no_findings(tmp_path: Path) -> None:
    so = _build(tmp_path, "clean", """
        #include <string.h>
        #include <omp.h>
        void add(const float* a, const float* b, float* o, int n) {
            #pragma omp parallel for
            for (int i = 0; i < n; ++i) o[i] = a[i] + b[i];
            memset(o, 0, 0);
        }
    """, extra=("-fopenmp",))
    names = {s.name for s in read_dynamic_symbols(so)}
    assert "add" in names
    assert any(n.startswith("GOMP_") for n in names)  # OpenMP is imported, and allowed
    assert check_extension_symbols(so) == []


@needs_cc
@pytest.mark.parametrize(
    ("decl", "call", "guard"),
    [
        ("int cudaStreamCreate(void**);", "void* s; cudaStreamCreate(&s);", "side_stream"),
        ("int cudaStreamCreateWithPriority(void**, unsigned, int);",
         "void* s; cudaStreamCreateWithPriority(&s, 1, 0);", "side_stream"),
        ("int cublasSetStream_v2(void*, void*);", "cublasSetStream_v2(0, 0);", "side_stream"),
        ("int cudaGraphLaunch(void*, void*);", "cudaGraphLaunch(0, 0);", "cuda_graph"),
        ("int cudaStreamBeginCapture(void*, int);", "cudaStreamBeginCapture(0, 0);", "cuda_graph"),
        ("int cudaDeviceSetLimit(int, unsigned long);", "cudaDeviceSetLimit(6, 1);",
         "l2_persistence"),
        ("int cudaDeviceReset(void);", "cudaDeviceReset();", "process_exit"),
        ("#include <unistd.h>", "unlink(\"/tmp/x\");", "filesystem"),
        ("#include <dlfcn.h>", "dlsym(dlopen(0, 1), \"cudaEventRecord\");", "dynamic_code"),
        ("#include <unistd.h>", "fork();", "process_abuse"),
        ("#include <stdlib.h>", "system(\"true\");", "process_abuse"),
        ("#include <sys/socket.h>", "socket(2, 1, 0);", "network"),
        ("#include <pthread.h>\nstatic void* w(void* a) { return a; }",
         "pthread_t t; pthread_create(&t, 0, w, 0);", "host_thread"),
    ],
)
def test_imported_symbols(tmp_path: Path, decl: str, call: str, guard: str) -> None:
    so = _build(tmp_path, "imp", f"{decl}\nvoid run(void) {{ {call} }}\n", extra=("-pthread",))
    findings = check_extension_symbols(so)
    assert guard in _guards(findings), findings
    assert all(f.reason.startswith("libimp.so ") for f in findings)
    for f in check_extension_symbols(so, PAPER):
        assert f.blocking == PAPER.blocks(f.guard)


@needs_cc
def test_policy_allows_imported_streams(tmp_path: Path) -> None:
    so = _build(tmp_path, "st", "int cudaStreamCreate(void**);\n"
                "void run(void) { void* s; cudaStreamCreate(&s); }\n")
    findings = check_extension_symbols(so, GuardPolicy(allow_streams=True))
    assert _guards(findings) == {"side_stream"} and blocking(findings) == []
    assert _blocking(check_extension_symbols(so, PAPER)) == {"side_stream"}


@needs_cc
def test_std_thread_detected_through_mangled_names(tmp_path: Path) -> None:
    so = _build(tmp_path, "thr", """
        #include <thread>
        extern "C" void run() { std::thread t([] {}); t.detach(); }
    """, cxx=True, extra=("-pthread",))
    findings = check_extension_symbols(so)
    assert "host_thread" in _guards(findings), findings
    assert blocking(findings) == []
    assert "host_thread" in _blocking(check_extension_symbols(so, PAPER))


@needs_cc
@pytest.mark.parametrize(
    "code",
    [
        "int cudaEventElapsedTime(float* ms, void* a, void* b) { *ms = 0.001f; return 0; }",
        "#include <time.h>\nint clock_gettime(clockid_t c, struct timespec* t) { return 0; }",
        "int cudaDeviceSynchronize(void) { return 0; }",
        "void* dlsym(void* h, const char* s) { return 0; }",
    ],
)
def test_exported_interposers(tmp_path: Path, code: str) -> None:
    so = _build(tmp_path, "exp", code)
    findings = check_extension_symbols(so, GuardPolicy.from_name("permissive"))
    assert _guards(findings) == {"symbol_interposition"}, findings
    assert all(f.blocking for f in findings)


@needs_cc
def test_exported_torch_namespace_function(tmp_path: Path) -> None:
    so = _build(tmp_path, "tns", """
        namespace torch { namespace cuda { void synchronize(long device) {} } }
        void mine(int) {}
    """, cxx=True)
    findings = check_extension_symbols(so)
    assert _guards(findings) == {"symbol_interposition"}, findings
    assert "torch::cuda::synchronize" in findings[0].reason or "_ZN5torch4cuda" in findings[0].reason


def test_not_an_elf_file(tmp_path: Path) -> None:
    p = tmp_path / "x.so"
    p.write_bytes(b"not an elf at all, just some bytes........................")
    with pytest.raises(ElfError):
        check_extension_symbols(p)
    p.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 60)
    with pytest.raises(ElfError):
        read_dynamic_symbols(p)


# ---- real extensions ---------------------------------------------------------------------------


@needs_cc
@pytest.mark.long  # a real torch extension: 20-45 s of parsing torch/extension.h on 2 cores
def test_a_real_torch_extension_has_no_symbol_finding(build_pool) -> None:
    """A real torch extension with OpenMP (an honest corpus kernel, built through the run's shared
    pool: its honest-corpus test finds it in the cache, or the other way round) links hundreds of
    libtorch symbols and libgomp's: none of them is a finding."""
    honest = Path(__file__).parent / "honest" / "kernels" / "l1_1_cpp_omp_gelu.py"
    report = build_pool.build(honest.read_text(), "cpu")
    assert report.status == "ok", report.log
    (ext,) = report.extensions
    assert check_extension_symbols(ext["so_path"]) == []


@needs_cc
def test_an_extension_that_starts_a_thread_is_a_host_thread_finding(tmp_path: Path) -> None:
    from torch.utils.cpp_extension import load_inline

    from tests.tiny_extension import python_module

    source = python_module({"run": "std::thread t([]() {}); t.detach(); Py_RETURN_NONE;"}, prelude="#include <thread>")
    build = tmp_path / "guards_thread_ext"
    build.mkdir()
    load_inline(name="guards_thread_ext", cpp_sources=source, build_directory=str(build), no_implicit_headers=True)
    (threaded,) = build.glob("guards_thread_ext*.so")
    assert "host_thread" in _guards(check_extension_symbols(threaded))
