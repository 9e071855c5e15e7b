"""Results a daemon sends name no host paths (issue 42): not its checkout, its Python environment,
its cache or the run directories of its evaluations (evalfarm.server.redact)."""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

import grpc
import pytest

from evalfarm.sandbox import project_root
from evalfarm.server.redact import HostPaths
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc
from tests.service.conftest import request


def test_host_paths_are_named_and_system_paths_stay(tmp_path):
    cache = tmp_path / "cache"
    redact = HostPaths(cache)
    text = (f'File "{project_root()}/evalfarm/judge/worker.py", line 3\n'
            f"-isystem {sys.prefix}/lib/python3.11/site-packages/torch/include -I/usr/include/python3.11\n"
            f"/tmp/evalfarm-run-build-0123abcd/compile-x/key/main.cpp:3:1: error: nope\n"
            f"{cache}/build/ext/ab/abcd/x.so {project_root()}x")
    out = redact(text)
    assert str(project_root()) + "/" not in out and f"{sys.prefix}/" not in out and str(cache) not in out
    assert "evalfarm-run-" not in out
    assert '"<project>/evalfarm/judge/worker.py"' in out and "<run>/compile-x/key/main.cpp:3:1" in out
    assert "/usr/include/python3.11" in out  # a system directory names nothing of this host's own
    assert f"{project_root()}x" in out  # only whole path components are replaced
    doc = json.dumps({"detail": text + "\n"})
    assert json.loads(redact(doc))["detail"] == out + "\n"  # the same inside the evidence's JSON


RAISES = '''
import torch.nn as nn
import torch.utils.cpp_extension  # noqa: F401 (a path in the traceback below, through torch)
raise RuntimeError("at import")

class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''

BROKEN = '''
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name=NAME, cpp_sources="#include <Python.h>\\nthis is not C++;\\n", functions=None,
                  no_implicit_headers=True)

class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''


@pytest.mark.parametrize("kind", ["load_error", "compile_error"])
def test_a_result_from_the_daemon_names_no_host_path(spawn_daemon, tmp_path, data_dir, kind):
    cache = tmp_path / "cache-redact"
    d = spawn_daemon("--warm-judges", "0", cache_dir=cache)
    source = RAISES if kind == "load_error" else BROKEN.replace("NAME", repr(f"evalfarm_t_redact_{secrets.token_hex(4)}"))
    req = request(source, num_correctness_inputs=10, timing_budget_s=0.3)
    req.task.source.source = (data_dir / "task_scale.py").read_bytes()
    req.task.source.name = "task_scale"
    with grpc.insecure_channel(d.target) as ch:
        sample = pb_grpc.EvalFarmStub(ch).Score(req, timeout=600)
    assert sample.verdict == (pb.VERDICT_LOAD_ERROR if kind == "load_error" else pb.VERDICT_COMPILE_ERROR), sample.detail
    sent = "\n".join([sample.detail, sample.evidence_json, *sample.evidence.guards])
    assert "Traceback" in sent or "error" in sent  # there was something to redact
    for path in {project_root(), sys.prefix, os.path.realpath(sys.prefix), str(cache), str(Path(cache).resolve())}:
        assert path + "/" not in sent, path
    assert "evalfarm-run-" not in sent
