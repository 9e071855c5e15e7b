"""The build cache is written only by trusted code (findings 3 and 6 of the sandbox issue).

Finding 6: candidate code moved its build into another candidate's cache key and the victim
loaded it. Candidate code now builds only in private directories; the build pool compiles each
reported specification itself, installs the result read-only under the key it computes, and
verifies an entry's hashes before it is used. Finding 3: the build step that imports the
candidate's module ran with the host's network; it now runs in its own network namespace.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
from pathlib import Path

import pytest
from attack_scoring import own_network_namespace

from evalfarm import ScoreConfig, Verdict
from evalfarm.build import BuildPool, ExtensionCache
from evalfarm.build.cache import CacheTampered
from evalfarm.scoring import as_candidate, as_task, score
from tests.tiny_extension import TWICE

KEY = "ab" * 32


def _fake_build(tmp_path, body: bytes = b"\x7fELF honest"):
    d = tmp_path / "private-build"
    d.mkdir(exist_ok=True)
    (d / "m.so").write_bytes(body)
    (d / "lock").write_text("")  # a torch FileBaton lock never reaches the cache
    return d


def test_install_is_write_once_read_only_and_verified(tmp_path):
    cache = ExtensionCache(tmp_path / "cache")
    entry, note = cache.install(KEY, _fake_build(tmp_path), {"seconds": 1.0})
    assert note == "" and cache.lookup(KEY, "m") == entry / "m.so" and not (entry / "lock").exists()
    assert stat.S_IMODE((entry / "m.so").stat().st_mode) == 0o444 and stat.S_IMODE(entry.stat().st_mode) == 0o555
    # A second install of the same key keeps the entry that verifies (write-once).
    again, note = cache.install(KEY, _fake_build(tmp_path, b"\x7fELF other"), {})
    assert again == entry and note == "" and (entry / "m.so").read_bytes() == b"\x7fELF honest"


def test_a_tampered_entry_is_not_used_and_is_replaced(tmp_path):
    cache = ExtensionCache(tmp_path / "cache")
    entry, _ = cache.install(KEY, _fake_build(tmp_path), {})
    os.chmod(entry / "m.so", 0o644)
    (entry / "m.so").write_bytes(b"\x7fELF evil")
    with pytest.raises(CacheTampered, match="do not match"):
        cache.verify(KEY)
    assert cache.lookup(KEY, "m") is None
    fresh, note = cache.install(KEY, _fake_build(tmp_path), {})
    assert "do not match" in note and "replaced" in note
    assert cache.lookup(KEY, "m") == fresh / "m.so" and (fresh / "m.so").read_bytes() == b"\x7fELF honest"


def _install_replace_evict(root: Path) -> None:
    cache = ExtensionCache(root / "cache")
    key = "cd" * 32
    entry, note = cache.install(key, _fake_build(root, b"honest"), {})
    assert note == "" and cache.lookup(key, "m") == entry / "m.so", note
    assert stat.S_IMODE(entry.stat().st_mode) == 0o555
    os.chmod(entry, 0o755)
    os.chmod(entry / "m.so", 0o644)
    (entry / "m.so").write_bytes(b"evil")
    os.chmod(entry, 0o555)
    fresh, note = cache.install(key, _fake_build(root, b"honest"), {})
    assert "replaced" in note and (fresh / "m.so").read_bytes() == b"honest", note
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o555
    cache.evict(key)
    assert not cache.entry_dir(key).exists()


def test_install_replace_and_evict_work_for_a_daemon_that_is_not_root():
    # Without root, renaming a directory into another parent needs write permission on it (its
    # ".." changes): the read-only staging directory could not be moved into place, so every
    # extension build of a non-root daemon ended INFRA_ERROR. Where we are root, a forked child
    # does it as uid 65534.
    import shutil
    import tempfile
    import traceback

    root = Path(tempfile.mkdtemp(prefix="evalfarm-cache-not-root-"))
    try:
        if os.geteuid() == 0:
            os.chown(root, 65534, 65534)
            os.chmod(root, 0o755)
        pid = os.fork()
        if pid == 0:  # the child: drop root, run the flow, report by exit code only
            code = 1
            try:
                if os.geteuid() == 0:
                    os.setgroups([])
                    os.setresgid(65534, 65534, 65534)
                    os.setresuid(65534, 65534, 65534)
                _install_replace_evict(root)
                code = 0
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the install flow failed without root (traceback above)"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_build_with_a_symlink_is_refused(tmp_path):
    cache = ExtensionCache(tmp_path / "cache")
    d = _fake_build(tmp_path)
    (d / "link").symlink_to("/etc/hostname")
    with pytest.raises(CacheTampered, match="not a plain file"):
        cache.install(KEY, d, {})
    assert not cache.entry_dir(KEY).exists()


def test_the_discovering_build_step_has_no_network(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        source = ("import socket\nfrom torch.utils.cpp_extension import load_inline\n"
                  f"socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'secret')\n"
                  "class ModelNew: pass\n")
        with BuildPool(cache_dir=tmp_path / "cache") as pool:
            report = pool.build(source, "cpu")
        if not own_network_namespace(report.isolation):
            pytest.skip(f"no network namespace on this machine: {report.isolation}")
        try:
            server.accept()[0].close()
            reached = True
        except TimeoutError:
            reached = False
    assert not reached, "the build step's candidate code reached a port on the host"
    assert report.status == "ok", report.log


ATTACKER = '''
import glob, os, shutil
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CACHE = {cache!r}
ext = load_inline(name="evalfarm_t_attacker", cpp_sources={attacker_cpp!r}, no_implicit_headers=True)
# Every entry that is not its own gets its own build moved into it.
mine = [p for p in glob.glob(CACHE + "/ext/*/*/evalfarm_t_attacker.so")]
for so in glob.glob(CACHE + "/ext/*/*/*.so"):
    if mine and so not in mine:
        try:
            os.chmod(os.path.dirname(so), 0o755)
            os.chmod(so, 0o644)
            shutil.copyfile(mine[0], so)
        except OSError:
            pass


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x):
        return torch.relu(x) * self.scale + self.bias
'''

VICTIM = f'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="evalfarm_t_victim", cpp_sources={TWICE!r}, no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x):
        return torch.relu(x) * (ext.twice(1) * self.scale / 2) + self.bias
'''


def test_a_candidate_cannot_move_its_build_into_another_candidates_key(data_dir, tmp_path):
    task = as_task(str(data_dir / "task_scale.py"))
    cfg = ScoreConfig(num_correctness_inputs=20, timing_budget_s=0.5, min_timed_rounds=14)
    with BuildPool(cache_dir=tmp_path / "cache", timeout_s=600) as pool:
        first = score(task, as_candidate(VICTIM), cfg, build_pool=pool)
        assert first.verdict is Verdict.OK, (first.verdict, first.detail)
        victim_files = sorted(Path(pool.cache_dir).glob("ext/*/*/evalfarm_t_victim.so"))
        assert victim_files
        before = [hashlib.sha256(p.read_bytes()).hexdigest() for p in victim_files]
        attacker = score(task, as_candidate(ATTACKER.format(cache=str(pool.cache_dir), attacker_cpp=TWICE)), cfg,
                         build_pool=pool)
        assert attacker.verdict is Verdict.OK, (attacker.verdict, attacker.detail)
        tampered = [hashlib.sha256(p.read_bytes()).hexdigest() for p in victim_files] != before
        again = score(task, as_candidate(VICTIM), cfg, build_pool=pool)
    assert again.verdict is Verdict.OK, (again.verdict, again.detail)
    notes = [e.get("note", "") for e in again.evidence.build.get("extensions", [])]
    worker_notes = [e.get("note", "") for e in again.evidence.build.get("worker_extensions", [])]
    if tampered:  # the attacker could write the cache (candidates under the daemon's uid): detected
        assert any("rebuilt" in n for n in notes + worker_notes), (notes, worker_notes)
    else:  # prevented: as root, workers and the discovering build step run as an unprivileged uid;
        # inside bubblewrap (any uid) the cache is a read-only bind
        in_bubblewrap = any(n.startswith("bubblewrap:") for n in attacker.evidence.isolation)
        assert os.geteuid() == 0 or in_bubblewrap, \
            "the attacker, under the daemon's own uid and without bubblewrap, should have been able to write the cache"
