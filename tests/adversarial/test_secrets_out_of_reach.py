"""Secrets out of reach of builds and workers (issue 42, item 5), on CPU, real sandboxes.

A daemon's token file, a secret planted next to it (in a directory on the daemon's ``sys.path``,
as the working directory of ``python -m evalfarm.server`` is) and a secret planted in its
extension cache: a candidate tries every route to them from the build (the module the build's
discover step runs, ``.incbin``, ``#include`` plain, macro-built and through an include path,
the compiler's own ``-include`` and ``@file`` flags, links it lays in its directory, ``/proc``)
and from the worker (the same reads, and an extension the worker builds for itself). Each
attack returns whatever it got in the result (the build log for the discover step, the verdict's
detail for the worker); the property checked is that no secret appears anywhere in the result.
A canary in a directory bound into the sandbox for tests (``EVALFARM_SANDBOX_SHARED_DIR``) is
read through the same routes, and must come back: the routes work, the secrets are just not there.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

import pytest
from attack_scoring import host_channel, score_attack

from evalfarm import ScoreConfig, Verdict
from evalfarm.ops import hostile_drill
from evalfarm.result import ScoreResult
from evalfarm.sandbox import confine, isolation
from evalfarm.scoring import as_task

QUICK = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.5, min_timed_rounds=14, check_other_sizes=False)
STRONG = isolation.assess("cpu")
pytestmark = pytest.mark.skipif(not STRONG.strong, reason=f"needs the strong sandbox: {STRONG.summary()}")


@pytest.fixture
def planted(tmp_path, build_pool, monkeypatch):
    """{name: (path, secret)}: the daemon's token, a secret next to it and one in its cache, each
    readable only by its owner (root here), the token's directory on this process's sys.path."""
    etc = tmp_path / "etc-evalfarm"
    etc.mkdir()
    files = {"token": etc / "token", "beside": etc / "planted-secret",
             "cache": Path(build_pool.cache_dir) / f"planted-secret-{secrets.token_hex(4)}"}
    out = {}
    for name, path in files.items():
        value = f"SECRET-{name}-{secrets.token_hex(12)}"
        path.write_text(value + "\n")
        path.chmod(0o600)
        out[name] = (path, value)
    monkeypatch.syspath_prepend(str(etc))  # what -m does with the daemon's working directory
    yield out
    files["cache"].unlink(missing_ok=True)


@pytest.fixture
def canary():
    """(path, value): a file every sandbox shows (the shared test directory), world-readable."""
    with host_channel() as shared:
        path = shared / "canary.txt"
        value = f"CANARY-{secrets.token_hex(12)}"
        path.write_text(value)
        path.chmod(0o644)
        yield path, value


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_scale.py"))


def _crossed(result: ScoreResult, planted: dict) -> list[str]:
    """The planted secrets that appear anywhere in the result (detail, build log, evidence)."""
    text = json.dumps(result.to_dict(), default=str)
    return [name for name, (_, value) in planted.items() if value in text]


SNOOP = r'''
import json, os
import torch.nn as nn

def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode("utf-8", "replace")
    except OSError as err:
        return f"<{type(err).__name__}>"

found = {}
for p in PATHS:
    for route in (p, "/proc/self/root" + p, "/proc/1/root" + p, "/proc/1/cwd/" + os.path.basename(p),
                  os.path.join(os.getcwd(), "..", "..", os.path.basename(p))):
        found[route] = _read(route)
for pid in (d for d in os.listdir("/proc") if d.isdigit()):
    for part in ("environ", "cmdline"):
        found[f"/proc/{pid}/{part}"] = _read(f"/proc/{pid}/{part}")
names = {os.path.basename(p) for p in PATHS}
hits = []
for base in ("/", os.getcwd()):  # every file of those names the sandbox shows, wherever it is
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/dev")]
        hits += [os.path.join(root, f) for f in files if f in names]
found["by_name"] = sorted(set(hits))
found["by_name_content"] = [_read(h) for h in sorted(set(hits))]
report = "FOUND" + json.dumps(found) + "END"
print(report, flush=True)  # the discover step's output reaches the build log
raise RuntimeError(report)  # the worker's reaches the verdict's detail

def _never_called():
    return load_inline  # names load_inline: the build pool runs this module (its discover step)

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
    def forward(self, x):
        return x
'''


def test_files_and_proc_show_no_secret_to_the_build_or_the_worker(task, build_pool, planted, canary):
    paths = [str(p) for p, _ in planted.values()] + [str(canary[0])]
    r = score_attack(task, SNOOP.replace("PATHS", repr(paths)), build_pool, QUICK)
    assert r.verdict is Verdict.LOAD_ERROR, (r.verdict, r.detail[-2000:])
    build_log = str(r.evidence.build.get("log", ""))
    # Both channels work: the canary came back from the discover step and from the worker.
    assert canary[1] in build_log, build_log[-2000:]
    assert canary[1] in r.detail, r.detail[-2000:]
    assert _crossed(r, planted) == []
    for text in (build_log, r.detail):
        found = json.loads(text.rsplit("FOUND", 1)[1].split("END", 1)[0])
        assert str(canary[0]) in found["by_name"]  # the search by name works
        shown = {os.path.realpath(h) for h in found["by_name"]}
        assert not shown & {str(p) for p, _ in planted.values()}, found["by_name"]  # no planted file, by any path


# The smallest extension, no torch headers; dump() returns what .incbin embedded (the drill's).
CAPI = hostile_drill.CAPI

BUILDS = '''
import os, sys
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

for link, target in LINKS:  # links laid where a later build might look (its own directory)
    try:
        os.symlink(target, link)
    except OSError:
        pass
ext = load_inline(name=NAME, cpp_sources=SRC, functions=None, no_implicit_headers=True, extra_cflags=CFLAGS,
                  extra_include_paths=INCLUDE_PATHS)
raise RuntimeError("LEAK" + ext.dump().decode("utf-8", "replace") + "END")

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
    def forward(self, x):
        return x
'''

# In the worker only (the discover step runs the module under another name): an extension the
# build pool never saw, which the worker then builds for itself, in its own sandbox.
WORKER_ONLY = '''
import sys
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

if __name__ == "evalfarm_candidate":
    ext = load_inline(name=NAME, cpp_sources=SRC, functions=None, no_implicit_headers=True)
    raise RuntimeError("LEAK" + ext.dump().decode("utf-8", "replace") + "END")

class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
    def forward(self, x):
        return x
'''


def _build_attack(blob: str, include: str = "", cflags: list[str] | None = None, include_paths: list[str] | None = None,
                  links: list[tuple[str, str]] | None = None, template: str = BUILDS) -> str:
    name = f"evalfarm_t_secret_{secrets.token_hex(4)}"
    src = CAPI.replace("BLOB", blob).replace("INCLUDE", include).replace("NAME", name)
    return (template.replace("NAME", repr(name)).replace("SRC", repr(src)).replace("CFLAGS", repr(cflags or []))
            .replace("INCLUDE_PATHS", repr(include_paths or [])).replace("LINKS", repr(links or [])))


def test_incbin_reads_what_the_build_sees(task, build_pool, canary):
    # The control for the routes below: .incbin of a file the sandbox shows embeds it, and the
    # candidate gets it back out (the finding of issue 42: the daemon's token, from a LOAD_ERROR).
    path, value = canary
    r = score_attack(task, _build_attack(str(path)), build_pool, QUICK)
    assert r.verdict is Verdict.LOAD_ERROR, (r.verdict, r.detail[-2000:])
    assert f"LEAK{value}" in r.detail


@pytest.mark.parametrize("route", ["incbin_token", "incbin_cache", "incbin_proc_root", "include_macro",
                                   "include_path", "cflag_include", "cflag_response_file", "linked_in_build_dir"])
def test_no_build_route_reaches_a_secret(task, build_pool, planted, canary, route):
    token, _ = planted["token"]
    cached, _ = planted["cache"]
    blob = str(canary[0])  # a file the sandbox shows: the route under test is then what fails, if anything
    attack = {
        "incbin_token": lambda: _build_attack(str(token)),
        "incbin_cache": lambda: _build_attack(str(cached)),
        "incbin_proc_root": lambda: _build_attack(f"/proc/1/root{token}"),
        "include_macro": lambda: _build_attack(blob, include=f'#define Q(x) #x\n#define P(x) Q(x)\n#include P({token})'),
        "include_path": lambda: _build_attack(blob, include=f'#include "{token.name}"', include_paths=[str(token.parent)]),
        "cflag_include": lambda: _build_attack(blob, cflags=["-include", str(token)]),
        "cflag_response_file": lambda: _build_attack(blob, cflags=[f"@{token}"]),
        "linked_in_build_dir": lambda: _build_attack("leak.bin", links=[("leak.bin", str(token)),
                                                                        ("evalfarm-ext/leak.bin", str(token))]),
    }[route]()
    r = score_attack(task, attack, build_pool, QUICK)
    assert _crossed(r, planted) == [], (r.verdict, r.detail[-2000:])
    assert r.verdict is not Verdict.OK


@pytest.mark.parametrize("target", ["token", "canary"])
def test_an_extension_the_worker_builds_itself_sees_no_secret(task, build_pool, planted, canary, target):
    path = planted["token"][0] if target == "token" else canary[0]
    r = score_attack(task, _build_attack(str(path), template=WORKER_ONLY), build_pool, QUICK)
    assert _crossed(r, planted) == [], (r.verdict, r.detail[-2000:])
    if target == "canary":  # the route works in the worker: what it shows comes back
        assert f"LEAK{canary[1]}" in r.detail, (r.verdict, r.detail[-2000:])
    else:
        assert r.verdict is not Verdict.OK


def test_the_sandboxes_are_shown_no_cache_cwd_or_checkout(build_pool, planted, tmp_path, monkeypatch):
    """What the build and worker views are made of: the Python environment and the evalfarm
    package, never the extension cache, a directory merely on sys.path, or the checkout around
    the package."""
    from evalfarm.sandbox import project_root

    monkeypatch.chdir(tmp_path)
    shown = confine.needed_paths()
    token_dir = str(planted["token"][0].parent)
    assert token_dir not in shown and str(tmp_path) not in shown
    assert not any(p == str(build_pool.cache_dir) or p.startswith(str(build_pool.cache_dir) + "/") for p in shown)
    assert os.path.join(project_root(), "evalfarm") in shown
    if not project_root().startswith(os.path.realpath(sys.prefix) + "/"):  # a checkout, not an installed package
        assert project_root() not in shown
