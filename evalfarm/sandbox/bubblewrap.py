"""Bubblewrap: the sandbox a candidate worker runs in where the host has ``bwrap``.

``EVALFARM_SANDBOX`` chooses: ``auto`` (the default) uses bubblewrap when ``bwrap`` is on the
PATH and a trial sandbox starts, and otherwise the built-in fallback (``evalfarm.sandbox.confine``);
``bubblewrap`` requires it (an evaluation fails with INFRA_ERROR naming why when it cannot be
had); ``builtin`` never uses it. Workers that use a GPU get bubblewrap under ``auto`` when the
daemon runs as root and workers switch to an unprivileged uid (the ``/dev/shm`` hand-over below
needs both); otherwise under ``bubblewrap`` only, where their arenas cannot be attached.

What a worker sees inside (``command``):

* new user (unprivileged daemons), PID, IPC, UTS, cgroup and network namespaces; its own
  ``/proc`` (no process of the judge or the daemon) and a minimal ``/dev`` (null, zero, random,
  urandom, tty, and on a GPU the NVIDIA device nodes);
* a filesystem made of read-only binds of the system directories (``/usr``, the ``/bin`` and
  ``/lib`` links), a few files of ``/etc``, the Python environment (torch), the ``evalfarm``
  package (not the checkout around it) and the toolchain (``confine.needed_paths``), and for a
  candidate worker the extensions its judge copied out of the cache for it; nothing else of the
  host (no home directory, no token, TLS key or config file, no cache of the daemon's, no other
  evaluation's directory);
* ``/tmp``, ``/dev/shm`` and its own directory as size-limited tmpfs mounts (each as large as
  the file-size limit), gone when it ends; the subdirectories the judge reads afterwards
  (``evalfarm-ext``) are bound back from the host. A CUDA worker run by root is the exception for
  ``/dev/shm``: CUDA's IPC (``cudaIpcOpenMemHandle``, with which it attaches the judge's arenas)
  opens files the judge's process made in the host's ``/dev/shm``, so that directory is bound
  until the arenas are attached; the worker then mounts a private tmpfs over it (with
  CAP_SYS_ADMIN, its last use) before it drops privileges and before any task or candidate code
  runs. It fails closed: a worker that cannot cover it runs nothing;
* run by root, bubblewrap keeps only CAP_SETUID, CAP_SETGID and CAP_CHOWN, with which the worker
  switches to an unprivileged uid before any task or candidate code runs (a user namespace
  would map its uid to the host's root); run by anyone else, a user namespace whose uid is the
  caller's, with further user namespaces refused. No new privileges either way.

Every process dies with bubblewrap (its PID namespace), and bubblewrap with the judge.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import shutil
import subprocess

MODE_ENV = "EVALFARM_SANDBOX"
MODES = ("auto", "bubblewrap", "builtin")
# Set in the worker's environment when it runs inside bubblewrap; the value is the evidence note.
INSIDE_ENV = "EVALFARM_SANDBOXED_BY"
# Set instead when it does not: why bubblewrap was not used (for the evidence).
NOTE_ENV = "EVALFARM_SANDBOX_NOTE"
# Set in a CUDA worker's environment when the host's /dev/shm is bound until its arenas are
# attached; the value is the size in bytes of the private tmpfs it then mounts over it.
SHM_ENV = "EVALFARM_SANDBOX_SHM_AFTER_ATTACH"
# A host directory bound writable into every worker's sandbox, for tests and debugging only: it is
# a channel between evaluations (and to the host), which the sandbox otherwise does not have.
SHARED_ENV = "EVALFARM_SANDBOX_SHARED_DIR"
# Files of /etc a worker may need (the dynamic loader's cache, compiler alternatives, user names).
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
             "localtime")
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
PROBE_TIMEOUT_S = 10.0


class SandboxUnavailable(RuntimeError):
    """``EVALFARM_SANDBOX=bubblewrap`` was asked for and bubblewrap cannot be used here."""


def mode() -> str:
    value = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise SandboxUnavailable(f"{MODE_ENV}={value!r}: expected one of {', '.join(MODES)}")
    return value


@dataclasses.dataclass(frozen=True)
class WorkerView:
    """What one worker's sandbox contains."""

    own_dir: str  # its working directory: a tmpfs of scratch_bytes
    scratch_bytes: int
    readable: tuple[str, ...]  # bound read-only at the same path
    keep: tuple[str, ...] = ()  # subdirectories of own_dir bound back from the host, writable
    network: bool = False  # True keeps the host's network (EVALFARM_WORKER_NETNS=0)
    devices: tuple[str, ...] = ()  # device nodes bound in (GPU)
    own_dir_tmpfs: bool = True  # False: own_dir is the host's directory, bound writable (a build's results)
    become_unprivileged: bool = True  # as root: keep the capabilities to switch uid (the worker does)
    shared: tuple[str, ...] = ()  # host directories bound writable (SHARED_ENV; tests and debugging)
    # The host's /dev/shm until the worker has attached its CUDA arenas; then the worker covers it
    # with a private tmpfs (SHM_ENV), with CAP_SYS_ADMIN kept until it drops privileges. Root only.
    host_shm_until_attach: bool = False


def _base_args(bwrap: str, network: bool, become_unprivileged: bool = True, remount_shm: bool = False) -> list[str]:
    args = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        args.append("--unshare-net")
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]
        if become_unprivileged:
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_CHOWN"]
        if remount_shm:
            args += ["--cap-add", "CAP_SYS_ADMIN"]
    else:
        args += ["--unshare-user", "--disable-userns"]
    for name in SYSTEM_DIRS:
        path = "/" + name
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


def _outermost(paths: list[str]) -> list[str]:
    real = sorted({os.path.abspath(p) for p in paths if p and os.path.exists(p)})
    return [p for p in real if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in real)]


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _tmpfs_bytes(view: WorkerView) -> int:
    """The size of each of the view's tmpfs mounts (at least 1 MiB)."""
    return max(1 << 20, int(view.scratch_bytes))


def command(bwrap: str, view: WorkerView, argv: list[str]) -> list[str]:
    """The bubblewrap command line that runs ``argv`` inside ``view``; its process needs the
    variables of ``environment(view)`` as well."""
    size = str(_tmpfs_bytes(view))
    if view.host_shm_until_attach and not (os.geteuid() == 0 and view.become_unprivileged):
        raise ValueError("the host's /dev/shm is bound only for a root worker that becomes unprivileged")
    args = _base_args(bwrap, view.network, view.become_unprivileged, remount_shm=view.host_shm_until_attach)
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", size, "--tmpfs", "/tmp"]
    if view.host_shm_until_attach:
        args += ["--bind", "/dev/shm", "/dev/shm"]
    else:
        args += ["--perms", "1777", "--size", size, "--tmpfs", "/dev/shm"]
    for dev in view.devices:
        args += ["--dev-bind-try", dev, dev]
    if view.devices:
        args += ["--ro-bind", "/sys", "/sys"]
    system = ["/usr", *(f"/{n}" for n in SYSTEM_DIRS)]
    readable = [p for p in _outermost(list(view.readable)) if not _covered(p, system)]
    for path in readable:
        args += ["--ro-bind", path, path]
    own = os.path.abspath(view.own_dir)
    if view.own_dir_tmpfs:
        args += ["--size", size, "--tmpfs", own]
    else:
        args += ["--bind", own, own]
    for name in view.keep:
        path = os.path.join(own, name)
        args += ["--bind", path, path]
    shared = _outermost(list(view.shared))
    for path in shared:
        args += ["--bind", path, path]
    # Directories bubblewrap made on the way to a bind are its own (mode 0700 when run by root):
    # open them for the unprivileged uid the worker becomes. Nothing of the host is in them.
    made = {"/etc"}
    for path in [*readable, own, *shared]:
        parent = os.path.dirname(path)
        while parent not in ("/", "") and not _covered(parent, readable + system) and parent != "/tmp":
            made.add(parent)
            parent = os.path.dirname(parent)
    for parent in sorted(made):
        args += ["--chmod", "0755", parent]
    args += ["--chdir", own, "--", *argv]
    return args


def describe(view: WorkerView) -> str:
    """The evidence note for a worker in this view."""
    mib = max(1, view.scratch_bytes >> 20)
    if os.geteuid() != 0:
        who = "user namespace with the caller's uid, no nested user namespaces"
    elif view.become_unprivileged:
        who = "root keeps only CAP_SETUID/SETGID/CHOWN to become unprivileged"
    else:
        who = "root without capabilities"
    net = "host network (turned off)" if view.network else "network"
    places = ["/tmp"] + ([] if view.host_shm_until_attach else ["/dev/shm"]) + (["own directory"] if view.own_dir_tmpfs else [])
    listed = places[0] if len(places) == 1 else ", ".join(places[:-1]) + " and " + places[-1]
    if view.host_shm_until_attach:
        who += " (and CAP_SYS_ADMIN until /dev/shm is covered)"
    return (f"bubblewrap: PID namespace with its own /proc; mount, IPC, UTS, {net} namespaces; {who}; "
            f"read-only system, Python (torch) and the evalfarm package, nothing else of the host; {listed} {mib} MiB "
            "tmpfs" + (" each" if len(places) > 1 else "")
            + (f"; devices {', '.join(os.path.basename(d) for d in view.devices)}" if view.devices else "")
            + (f"; {SHARED_ENV} bound writable (testing only)" if view.shared else ""))


def environment(view: WorkerView) -> dict[str, str]:
    """The variables a process inside ``view`` is started with: the evidence note, and the size of
    the tmpfs it mounts over the host's /dev/shm when it has that (``SHM_ENV``)."""
    env = {INSIDE_ENV: describe(view)}
    if view.host_shm_until_attach:
        env[SHM_ENV] = str(_tmpfs_bytes(view))
    return env


@functools.cache
def _probe(bwrap: str, euid: int) -> str:
    """"" when a trial sandbox (the same namespaces and binds a worker gets) runs, else why not."""
    args = _base_args(bwrap, network=False) + ["--proc", "/proc", "--dev", "/dev", "--", "/usr/bin/env", "true"]
    try:
        proc = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{type(err).__name__}: {err}"
    if proc.returncode:
        return (proc.stderr.decode("utf-8", "replace").strip() or f"exit code {proc.returncode}")[:300]
    return ""


def gpu_shm_handover() -> bool:
    """Whether a CUDA worker can have the host's /dev/shm until its arenas are attached and cover
    it afterwards: only a root daemon whose workers switch to an unprivileged uid."""
    from evalfarm.sandbox.confine import target_identity

    return os.geteuid() == 0 and target_identity() is not None


def selected(gpu: bool = False) -> tuple[str | None, str]:
    """(the bwrap executable to use, or None; a note for the evidence when it is not used).
    ``gpu``: for a worker that uses a GPU, which ``auto`` puts in bubblewrap only where the
    ``/dev/shm`` hand-over works (``gpu_shm_handover``) and otherwise leaves to the built-in
    sandbox (``bubblewrap`` forces it; its arenas then cannot be attached).
    Raises SandboxUnavailable when bubblewrap is required and cannot be had."""
    chosen = mode()
    if chosen == "builtin":
        return None, f"bubblewrap not used: {MODE_ENV}=builtin"
    if gpu and chosen == "auto" and not gpu_shm_handover():
        return None, (f"bubblewrap not used for a GPU worker: CUDA arenas need the host's /dev/shm until "
                      f"attached, which only a root daemon whose workers change uid can hand over "
                      f"({MODE_ENV}=bubblewrap forces it)")
    bwrap = shutil.which("bwrap")
    why = "bwrap not found on PATH" if bwrap is None else _probe(bwrap, os.geteuid())
    if why:
        if chosen == "bubblewrap":
            raise SandboxUnavailable(f"{MODE_ENV}=bubblewrap but bubblewrap cannot be used: {why}")
        return None, f"bubblewrap not used: {why}"
    return bwrap, ""


def shared_dirs() -> tuple[str, ...]:
    """The SHARED_ENV directory, when one is set and exists."""
    path = os.environ.get(SHARED_ENV, "")
    return (path,) if path and os.path.isdir(path) else ()


def gpu_device_nodes() -> tuple[str, ...]:
    """The NVIDIA device nodes a CUDA worker opens (control, UVM, the GPUs, capabilities)."""
    nodes = [p for p in glob.glob("/dev/nvidia*") if not os.path.isdir(p)]
    if os.path.isdir("/dev/nvidia-caps"):
        nodes.append("/dev/nvidia-caps")
    return tuple(sorted(nodes))


def exit_signal(returncode: int | None) -> int | None:
    """The signal that ended the sandboxed command, from bubblewrap's exit code (128 + signal)."""
    if returncode is not None and 128 < returncode < 128 + 65:
        return returncode - 128
    return None
