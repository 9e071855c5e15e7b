"""Which isolation this host gives a candidate: one check, read by the daemon at start, by every
result's evidence and by ``evalfarm status``.

The farm's *strong* sandbox is bubblewrap (``evalfarm.sandbox.bubblewrap``) around every process that
runs or compiles candidate code (the build's discover and compile children, the candidate
worker), with all three of:

* **namespaces**: its own PID namespace (and ``/proc``), mount namespace and network namespace;
* **a filesystem of its own**: read-only system, Python and torch directories, the ``evalfarm``
  package and its own work directory; no token, TLS key, config file or cache of the daemon's;
* **an identity that is not the daemon's**: run by root, bubblewrap keeps only what the process
  needs to switch to an unprivileged uid (65534, ``EVALFARM_SANDBOX_UID``), which it does
  before any candidate code runs; run by another user, a user namespace without capabilities.

Anything less is *weak*: the built-in fallback (``evalfarm.sandbox.confine``) shares the host's
filesystem, and without root it has no namespaces and no uid change at all, so a candidate reads
what the daemon's user can read. ``assess`` says which, and for a weak sandbox what is missing and
how to fix it, in one line. The daemon refuses to start on a weak sandbox unless told otherwise
(``evalfarm serve --allow-weak-sandbox``).
"""

from __future__ import annotations

import dataclasses
import os

from evalfarm.sandbox import bubblewrap, confine

# Where an operator reads how to get the strong sandbox on each kind of host.
DOCS = 'docs/operations.md, "Isolation"'


@dataclasses.dataclass(frozen=True)
class Isolation:
    """The isolation candidates get on this host for ``device`` ("cpu" or "cuda")."""

    device: str
    build: str  # "bubblewrap" or why the build's children do not get it
    worker: str  # "bubblewrap" or why the candidate worker does not get it
    identity: str  # who candidate code runs as
    network: str  # "own network namespace" or why not
    missing: tuple[str, ...] = ()  # what keeps it from being strong
    fix: str = ""  # the first thing to do about it

    @property
    def strong(self) -> bool:
        return not self.missing

    def summary(self) -> str:
        """One line for the evidence, the log and ``evalfarm status``."""
        if self.strong:
            return (f"strong: bubblewrap for builds and workers ({self.device}); PID, mount and network "
                    f"namespaces; only system, Python and torch directories and its own; {self.identity}")
        return f"WEAK: {'; '.join(self.missing)}"

    def refusal(self) -> str:
        """Why a daemon does not serve untrusted candidates here, and the fix, in one line."""
        return (f"no strong sandbox for candidates on this host: {'; '.join(self.missing)}. Fix: {self.fix} "
                f"({DOCS}); or pass --allow-weak-sandbox to serve anyway (every result and `evalfarm status` "
                "then say so)")


def _bubblewrap(gpu: bool) -> str:
    """"bubblewrap" when a process of this kind would run inside it, else why not."""
    try:
        bwrap, why_not = bubblewrap.selected(gpu=gpu)
    except bubblewrap.SandboxUnavailable as err:
        return str(err)
    except ValueError:  # the GPU choice reads the uid workers switch to
        return f"{confine.UID_ENV}={os.environ.get(confine.UID_ENV)!r} is not uid[:gid]"
    return "bubblewrap" if bwrap is not None else why_not.removeprefix("bubblewrap not used: ")


def _fix(why: str) -> str:
    if why.startswith(f"{confine.UID_ENV}="):
        return f"unset {confine.UID_ENV} (uid 65534) or give it as uid:gid"
    if "not found on PATH" in why:
        return "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
    if f"{bubblewrap.MODE_ENV}=builtin" in why or "expected one of" in why:
        return f"unset {bubblewrap.MODE_ENV} (or set it to auto)"
    if "GPU worker" in why:
        return ("run the daemon as root (its candidates run as uid 65534 inside bubblewrap): a GPU worker's "
                "CUDA arenas need a hand-over that only a root daemon can make")
    if os.geteuid() == 0:
        return ("let the daemon make namespaces: in a container, add CAP_SYS_ADMIN and CAP_NET_ADMIN and run it "
                "with seccomp and AppArmor unconfined (or profiles that allow unshare, mount and pivot_root)")
    return ("let the daemon's user make user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
            "kernel.apparmor_restrict_unprivileged_userns=0; in a container also seccomp and AppArmor unconfined), "
            "or run the daemon as root")


def assess(device: str = "cpu") -> Isolation:
    """What a candidate of a ``device`` evaluation ("cpu", "cuda" or "cuda:N") gets here, from the
    same choices the build pool and the judge's workers make (``bubblewrap.selected``)."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    build = _bubblewrap(gpu=False)
    worker = _bubblewrap(gpu=kind == "cuda")
    missing: list[str] = []
    fixes: list[str] = []
    without = [(what, how) for what, how in (("builds", build), (f"{kind.upper()} workers", worker))
               if how != "bubblewrap"]
    if len(without) == 2 and build == worker:
        without = [(f"builds and {kind.upper()} workers", build)]
    for what, how in without:
        missing.append(f"{what} run without bubblewrap ({how}): " + (
            "the built-in sandbox shows them the host's files" if os.geteuid() == 0 else
            "no namespaces, and the daemon's own uid and files"))
        fixes.append(_fix(how))
    if os.geteuid() == 0:
        try:
            target = confine.target_identity()
        except ValueError:
            target = (-1, -1)
            missing.append(f"{confine.UID_ENV}={os.environ.get(confine.UID_ENV)!r} is not uid[:gid]")
            fixes.append(f"unset {confine.UID_ENV} (uid 65534) or give it as uid:gid")
        if target is None:
            identity = "root"
            missing.append(f"candidate code stays root ({confine.UID_ENV}=off)")
            fixes.append(f"unset {confine.UID_ENV}")
        else:
            identity = f"uid {target[0]} gid {target[1]} (the daemon is root)"
    else:
        identity = (f"a user namespace with the daemon's uid {os.geteuid()} and no capabilities"
                    if "bubblewrap" in (build, worker) else f"the daemon's own uid {os.geteuid()}")
    if confine.own_network():
        network = "own network namespace"
    else:
        network = f"the host's network ({confine.NETNS_ENV}=0)"
        missing.append(f"candidate code keeps the host's network ({confine.NETNS_ENV}=0)")
        fixes.append(f"unset {confine.NETNS_ENV}")
    return Isolation(kind, build, worker, identity, network, tuple(missing), fixes[0] if fixes else "")
