"""The fallback sandbox: kernel primitives that confine a worker when bubblewrap is not used.

What a worker gets, in order (``evalfarm.judge.worker.main`` and ``Worker.run``):

1. ``enter_namespaces``: new PID, mount and network namespaces (needs root, i.e. CAP_SYS_ADMIN).
   The calling process forks a *namespace init* (PID 1 there), which mounts a fresh ``/proc``
   showing only the namespace and forks the worker proper (PID 2). Every process the candidate
   starts, including ones that call setsid(), lives in the namespace and dies with its init; the
   init dies with the outer process and the outer process with the judge (PR_SET_PDEATHSIG at
   every step). ``/proc`` shows no process of the judge or the daemon.
2. ``drop_privileges``: after the set-up that needs root (arenas mapped), switch to an
   unprivileged uid/gid (65534 unless configured), with no supplementary groups, no capabilities
   and PR_SET_NO_NEW_PRIVS. Directories on the way to the interpreter, the project and the
   extension cache that the new uid cannot traverse (``/root``) are masked in the worker's own
   mount namespace by an empty tmpfs with only the needed subtrees bound back read-only.
   Before that, ``private_scratch``: the worker's own directory (its cwd, ``HOME`` and ``TMPDIR``)
   and ``/dev/shm`` become size-limited tmpfs mounts of its own, so what it writes there is bounded
   in total (not only per file) and vanishes with its mount namespace.

Nothing here raises for a refused request: every step returns a note for the evidence.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import stat
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
# Set by enter_namespaces once this process has a mount namespace of its own: mounts made after
# that are invisible to the host (without one, a mount here would change the host's).
PRIVATE_MOUNTS = False
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

# The unprivileged identity a root-run worker switches to ("uid:gid", or "off" to stay root).
UID_ENV = "EVALFARM_SANDBOX_UID"
DEFAULT_UID = 65534
# "0" keeps the worker in the host's PID and mount namespaces (for debugging only).
PIDNS_ENV = "EVALFARM_WORKER_PIDNS"

_libc: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL("libc.so.6", use_errno=True)
        _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return _libc


def _err() -> str:
    code = ctypes.get_errno()
    return f"{errno.errorcode.get(code, code)} ({os.strerror(code)})"


def prctl(option: int, arg: int) -> str:
    """"" on success, else why not."""
    try:
        return "" if libc().prctl(option, arg, 0, 0, 0) == 0 else _err()
    except OSError as err:
        return str(err)


def die_with_parent(expected_parent: int | None = None) -> None:
    """SIGKILL this process when its parent ends; exit now if the parent is already gone."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)


def harden_trusted_process() -> list[str]:
    """For the judge: not dumpable (its memory and environment unreadable to other uids and to
    ptrace), a child subreaper (orphaned descendants come back to it to be killed)."""
    notes = []
    why = prctl(PR_SET_DUMPABLE, 0)
    notes.append("judge not dumpable" if not why else f"judge dumpable: {why}")
    why = prctl(PR_SET_CHILD_SUBREAPER, 1)
    notes.append("judge is child subreaper" if not why else f"judge not a subreaper: {why}")
    return notes


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> str:
    def enc(s: str | None) -> bytes | None:
        return s.encode() if s is not None else None

    if libc().mount(enc(source), enc(target), enc(fstype), flags, enc(data)) == 0:
        return ""
    return _err()


def _exit_like(status: int) -> None:
    """Leave with the same outcome as a child whose wait status is ``status``."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _reap_until(child: int) -> int:
    """Wait for every child (a namespace init reaps orphans too) until ``child`` ends; its status."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1 << 8
        except InterruptedError:
            continue
        if pid == child:
            return status


def enter_namespaces(network: bool = True, pid: bool = True) -> list[str]:
    """Put the rest of this process's life into new PID (with its own /proc), mount and network
    namespaces. Call before any thread exists. Returns only in the process that goes on (the
    namespace's PID 2, or this process when no PID namespace could be had); notes for the evidence.
    """
    notes: list[str] = []
    flags = CLONE_NEWNET if network else 0
    if pid:
        flags |= CLONE_NEWPID | CLONE_NEWNS
    if not flags:
        return ["no network namespace: turned off"]
    try:
        ok = libc().unshare(flags) == 0
        why = "" if ok else f"unshare failed: {_err()}"
    except OSError as err:
        ok, why = False, f"libc not loadable: {err}"
    if not ok and pid and network:  # without root: at least try the network namespace alone
        notes.append(f"no PID/mount namespace: {why}")
        from evalfarm.sandbox import enter_network_namespace

        netwhy = enter_network_namespace()
        notes.append("network namespace" if not netwhy else f"no network namespace: {netwhy}")
        return notes
    if not ok:
        return [f"no {'PID/mount' if pid else 'network'} namespace: {why}"]
    if network:
        notes.append("network namespace")
    if not pid:
        return notes
    init = os.fork()
    if init:  # the outer process: stays in the host's PID namespace, mirrors the init's end
        signal.signal(signal.SIGTERM, lambda *_: os.kill(init, signal.SIGKILL))
        status = _reap_until(init)
        if os.WIFEXITED(status) and 128 < os.WEXITSTATUS(status) < 128 + 65:  # the init's way to say "signal"
            status = os.WEXITSTATUS(status) - 128
        _exit_like(status)
    die_with_parent(0)  # PID 1 of the new namespace: its parent is outside it, seen as 0
    global PRIVATE_MOUNTS
    why = _mount(None, "/", None, MS_REC | MS_PRIVATE)
    PRIVATE_MOUNTS = not why
    if not why:
        why = _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    notes.append("PID namespace with its own /proc" if not why else f"PID namespace, host /proc still visible: {why}")
    worker = os.fork()
    if worker:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        status = _reap_until(worker)
        # PID 1 cannot kill itself with a signal; report a signal death as 128 + signal and let the
        # outer process turn it back into that signal.
        os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else
                 (os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1))
    die_with_parent(1)
    return notes


NETNS_ENV = "EVALFARM_WORKER_NETNS"  # "0" keeps the host's network (a deployment's choice)


def own_network() -> bool:
    """Whether processes that run candidate code get a network namespace of their own."""
    return os.environ.get(NETNS_ENV, "1") != "0"


def enter_sandbox() -> list[str]:
    """The namespaces of a process that runs candidate code (worker, build runner): bubblewrap's
    when the process was started inside it (``evalfarm.sandbox.bubblewrap``), otherwise our own
    (``enter_namespaces``); the notes for the evidence. Call first, with one thread."""
    from evalfarm.sandbox.bubblewrap import INSIDE_ENV, NOTE_ENV

    if os.environ.get(INSIDE_ENV):  # bubblewrap made the namespaces and the filesystem
        return [os.environ[INSIDE_ENV]]
    notes = enter_namespaces(network=own_network(), pid=os.environ.get(PIDNS_ENV, "1") != "0")
    if os.environ.get(NOTE_ENV):
        notes.append(os.environ[NOTE_ENV])  # why bubblewrap was not used
    return notes


def target_identity() -> tuple[int, int] | None:
    """The uid/gid a root worker switches to; None when it stays (not root, or turned off)."""
    if os.geteuid() != 0:
        return None
    value = os.environ.get(UID_ENV, "").strip()
    if value.lower() in ("off", "0", "root"):
        return None
    if not value:
        return DEFAULT_UID, DEFAULT_UID
    uid_text, _, gid_text = value.partition(":")
    uid = int(uid_text)
    return uid, int(gid_text) if gid_text else uid


def _can_traverse(path: str, uid: int, gid: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return True  # nothing to fix
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _blocking_ancestor(path: str, uid: int, gid: int) -> str | None:
    parts = os.path.abspath(path).split(os.sep)
    for i in range(2, len(parts) + 1):
        d = os.sep.join(parts[:i]) or os.sep
        if not _can_traverse(d, uid, gid):
            return d
    return None


def expose_paths(paths: list[str], uid: int, gid: int) -> list[str]:
    """In this (private) mount namespace, make ``paths`` reachable for ``uid``: each directory in
    the way is covered by an empty tmpfs, and the needed subtree under it is bound back read-only.
    Everything else under that directory (another user's home, a token file) disappears."""
    notes: list[str] = []
    masks: dict[str, list[str]] = {}
    wanted = sorted({os.path.abspath(p) for p in paths if os.path.exists(p)})
    # Only the outermost of nested paths needs binding.
    wanted = [p for p in wanted if not any(p != q and p.startswith(q.rstrip(os.sep) + os.sep) for q in wanted)]
    for p in wanted:
        blocker = _blocking_ancestor(p, uid, gid)
        if blocker is not None and p != blocker:
            masks.setdefault(blocker, []).append(p)
    for blocker, keep in sorted(masks.items()):
        fds = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in keep}
        why = _mount("tmpfs", blocker, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        if why:
            notes.append(f"could not mask {blocker}: {why}")
            continue
        for p, fd in fds.items():
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(p, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(p), exist_ok=True)
                open(p, "w").close()
            why = _mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC) or _mount(
                None, p, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
            os.close(fd)
            if why:
                notes.append(f"could not bind {p}: {why}")
        notes.append(f"{blocker} masked (only {', '.join(os.path.relpath(p, blocker) for p in keep)} "
                     "visible, read-only)")
    return notes


def private_scratch(scratch_dir: str, uid: int, gid: int, size_bytes: int, keep: tuple[str, ...] = ()) -> list[str]:
    """Size-limited tmpfs mounts of this process's own over ``scratch_dir`` (entered: the worker's
    cwd) and ``/dev/shm``, owned by ``uid``/``gid``; only in a private mount namespace. The
    subdirectories named in ``keep`` stay the host's (bound back into the tmpfs), for what the
    judge must read afterwards."""
    if not PRIVATE_MOUNTS:
        return ["no scratch quota: no mount namespace of its own"]
    mib = max(1, size_bytes >> 20)
    notes = []
    kept: dict[str, int] = {}
    for name in keep:
        path = os.path.join(scratch_dir, name)
        os.makedirs(path, exist_ok=True)
        os.chown(path, uid, gid)
        kept[name] = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    why = _mount("tmpfs", scratch_dir, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0700,uid={uid},gid={gid},size={mib}m")
    for name, fd in kept.items():
        if not why:
            target = os.path.join(scratch_dir, name)
            os.makedirs(target, exist_ok=True)
            bound = _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
            if bound:
                notes.append(f"{name} not kept on the host's disk: {bound}")
        os.close(fd)
    if not why:
        os.chdir(scratch_dir)  # onto the new mount (the old directory stays the judge's)
    notes.append(f"own directory a {mib} MiB tmpfs" if not why else f"own directory on the host's disk: {why}")
    why = _private_shm(mib)
    notes.append(f"/dev/shm a private {mib} MiB tmpfs" if not why else f"host /dev/shm: {why}")
    return notes


def _private_shm(mib: int) -> str:
    """Mount a tmpfs of ``mib`` MiB over ``/dev/shm`` in this mount namespace; "" or why not."""
    return _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={mib}m")


def cover_host_shm(size_bytes: int) -> list[str]:
    """Mount a private, size-limited tmpfs over ``/dev/shm`` (a worker inside bubblewrap that had
    the host's until its CUDA arenas were attached; its mount namespace is bubblewrap's, so the
    host never sees this mount). Raises OSError when it cannot: candidate code must never run
    with the host's ``/dev/shm`` in view."""
    mib = max(1, size_bytes >> 20)
    why = _private_shm(mib)
    if why:
        raise OSError(f"could not cover the host's /dev/shm after attaching the arenas: {why}")
    return [f"/dev/shm the host's until the arenas were attached, then a private {mib} MiB tmpfs"]


def hand_over(path: str, uid: int, gid: int) -> None:
    """Give ``path`` and everything under it to ``uid``/``gid`` (links themselves, not their targets).
    Deepest first: a process without CAP_DAC_OVERRIDE (root inside bubblewrap) can no longer
    traverse a directory of mode 0700 once it has given it away."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in [*(os.path.join(root, x) for x in dirs + files), root]:
            os.lchown(name, uid, gid)


def drop_privileges(uid: int, gid: int, writable: list[str], needed: list[str]) -> list[str]:
    """Switch this root process to ``uid``/``gid`` for good; ``writable`` directories are given
    to it first, ``needed`` paths made reachable. Raises PermissionError when the switch fails
    (running candidate code as root instead would be worse than not running it)."""
    notes = expose_paths(needed, uid, gid)
    for d in writable:
        hand_over(d, uid, gid)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise PermissionError(f"could not switch to uid {uid}")
    why = prctl(PR_SET_NO_NEW_PRIVS, 1)
    notes.append(f"unprivileged uid {uid} gid {gid}, no capabilities"
                 + (", no new privileges" if not why else f"; PR_SET_NO_NEW_PRIVS failed: {why}"))
    return notes


def needed_paths() -> list[str]:
    """What a process that runs or compiles candidate code reads, and all of the host a sandbox
    shows it besides the system directories: the interpreter and its Python environment (torch is
    there), the ``evalfarm`` package alone (not the checkout around it), CUDA and the compilers.
    Not the caller's working directory or other entries of its ``sys.path``: a daemon started in
    its cache or config directory, or from a checkout holding a token, shows none of those."""
    import sysconfig

    from evalfarm.sandbox import project_root

    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    paths = {*prefixes, os.path.join(project_root(), "evalfarm"), os.path.dirname(os.path.realpath(sys.executable))}
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "include", "platinclude"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(p)
    roots = [os.path.realpath(p) for p in prefixes]
    for p in sys.path:  # the environment's own package directories (a user site, a zipped stdlib)
        real = os.path.realpath(p) if p else ""
        if real and os.path.exists(real) and (
                any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)
                or os.path.basename(real) in ("site-packages", "dist-packages")):
            paths.add(real)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            paths.add(os.environ[var])
    paths.update(toolchain_paths())
    return sorted(os.path.realpath(p) for p in paths)


# The compilers an extension build calls: named by these variables, else found on PATH.
COMPILER_VARS = ("CXX", "CC", "CUDAHOSTCXX", "NVCC_CCBIN")
COMPILER_NAMES = ("c++", "g++", "gcc", "cc", "clang++", "nvcc", "ninja")


def toolchain_paths(env: dict[str, str] | None = None) -> list[str]:
    """The install trees of the compilers a build uses and the library directories named by
    LD_LIBRARY_PATH, so that a build or a worker in a sandbox that shows only some of the host's
    files finds a toolchain installed outside ``/usr`` (``/opt/gcc/bin/g++`` gives ``/opt/gcc``,
    with its ``lib64`` and ``libexec``). A compiler whose tree would be ``/`` or a home directory
    gives only its own ``bin`` directory: a sandbox never shows a whole home for a compiler."""
    import shutil

    env = os.environ if env is None else env
    found: set[str] = set()
    programs = [env[v].split()[0] for v in COMPILER_VARS if env.get(v, "").strip()]
    programs += [p for p in (shutil.which(n, path=env.get("PATH")) for n in COMPILER_NAMES) if p]
    homes = {os.path.realpath(os.path.expanduser("~")), "/root", "/home"}
    for program in programs:
        if not os.path.isabs(program):
            program = shutil.which(program, path=env.get("PATH")) or ""
        for path in {program, os.path.realpath(program)} - {""}:
            bin_dir = os.path.dirname(path)
            tree = os.path.dirname(bin_dir) if os.path.basename(bin_dir) == "bin" else bin_dir
            too_wide = tree == "/" or tree in homes or os.path.dirname(tree) in homes - {"/root"}
            found.add(bin_dir if too_wide else tree)
    for d in env.get("LD_LIBRARY_PATH", "").split(":"):
        if d and os.path.isabs(d) and os.path.isdir(d):
            found.add(d)
    return sorted(p for p in found if os.path.isdir(p))
