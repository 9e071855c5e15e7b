"""The daemon's settings, validated once at start-up."""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from pathlib import Path

from evalfarm.eval_budget import DEADLINE_GRACE_S
from evalfarm.server.slot_health import HealthPolicy

DEFAULT_MAX_SOURCE_BYTES = 1 << 20


class ServerConfigError(ValueError):
    """The daemon cannot start with these settings; the message says why."""


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 50051
    devices: tuple[str, ...] = ("cpu",)  # one entry per slot: "cpu" or "cuda:N"
    gpu_names: tuple[str, ...] = ()  # one per slot in CUDA mode
    gpu_uuids: tuple[str, ...] = ()  # one per slot in CUDA mode, "" where unknown
    queue_limit: int = 64
    auth_token: str | None = None  # one fixed token (tests, embedding)
    auth_token_file: Path | None = None  # one or two tokens, re-read when the file changes
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    metrics_port: int | None = None
    health_port: int | None = None  # plaintext gRPC health only (kubelet probes cannot speak TLS)
    kernelbench_root: Path | None = None
    cache_dir: Path | None = None
    build_workers: int = 2
    # Judge processes kept started ahead, per slot (0: start each on demand); None: 1 on GPU slots,
    # 0 on CPU slots (a CPU evaluation uses every core, so a standby's start-up only competes with it).
    warm_judges: int | None = None
    # While a standby judge of its device starts up, an evaluation checks its rounds but sets their
    # times aside (evalfarm.judge.serve.RoundsHold); False: they are timed too.
    standby_hold: bool = True
    # Candidates one judge serves in a row for one task and settings (evalfarm.judge.task_window:
    # the task's set-up made once, fresh workers and inputs for each); 1: a judge per evaluation.
    # None: 16 on GPU slots, 1 on CPU slots.
    task_window: int | None = None
    # How long a judge whose window is open waits for its task's next candidate.
    task_window_idle_s: float = 30.0
    max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES
    drain_timeout_s: float = 60.0
    # The longest one evaluation may take: its deadline when the request gives none (a longer
    # deadline_s is cut to it); running past it is TIMEOUT (evalfarm.eval_budget).
    max_eval_s: float = 1800.0
    # How long past an evaluation's deadline the daemon waits for its TIMEOUT before calling it stuck.
    deadline_grace_s: float = DEADLINE_GRACE_S
    host_label: str = dataclasses.field(default_factory=socket.gethostname)
    fault_threshold: int = 3  # faults in a row that take a slot out of service (0: never)
    probe_interval_s: float = 60.0  # first retry of a failed known-good probe
    # Serve even where candidates cannot have the strong sandbox (evalfarm.sandbox.isolation); every
    # result's evidence and the Capacity answer then say so.
    allow_weak_sandbox: bool = False

    def __post_init__(self) -> None:
        if not self.devices:
            raise ServerConfigError("no slots: give --slots N (cpu) or --gpus")
        if self.queue_limit < 0:
            raise ServerConfigError("--queue-limit must be >= 0")
        if not 0 <= self.port <= 65535:
            raise ServerConfigError(f"--port {self.port} is out of range")
        if self.max_source_bytes < 1:
            raise ServerConfigError("--max-source-bytes must be >= 1")
        if self.build_workers < 1:
            raise ServerConfigError("--build-workers must be >= 1")
        if self.warm_judges is not None and not 0 <= self.warm_judges <= 4:
            raise ServerConfigError(f"--warm-judges must be 0-4, got {self.warm_judges}")
        if self.task_window is not None and not 1 <= self.task_window <= 256:
            raise ServerConfigError(f"--task-window must be 1-256 candidates (1: off), got {self.task_window}")
        if not 0 < self.task_window_idle_s <= 3600:
            raise ServerConfigError(f"--task-window-idle must be in (0, 3600] seconds, got {self.task_window_idle_s:g}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ServerConfigError("--tls-cert and --tls-key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ServerConfigError("--tls-client-ca needs --tls-cert and --tls-key")
        if self.fault_threshold < 0:
            raise ServerConfigError("--fault-threshold must be >= 0 (0 never takes a slot out)")
        if self.probe_interval_s <= 0:
            raise ServerConfigError("--probe-interval must be > 0 seconds")
        if not self.authenticated and not is_loopback(self.host):
            raise ServerConfigError(
                f"refusing to listen on non-loopback address {self.host!r} without "
                "--auth-token-file: anyone who can reach the port could run code on this host"
            )

    @property
    def authenticated(self) -> bool:
        return self.auth_token is not None or self.auth_token_file is not None

    @property
    def health_policy(self) -> HealthPolicy:
        return HealthPolicy(fault_threshold=self.fault_threshold, probe_interval_s=self.probe_interval_s,
                            probe_max_interval_s=max(900.0, self.probe_interval_s))

    @property
    def standby_judges_per_slot(self) -> int:
        if self.warm_judges is not None:
            return self.warm_judges
        return 0 if self.device_mode == "cpu" else 1

    @property
    def task_window_candidates(self) -> int:
        if self.task_window is not None:
            return self.task_window
        return 1 if self.device_mode == "cpu" else 16

    @property
    def slots(self) -> int:
        return len(self.devices)

    @property
    def device_mode(self) -> str:
        return "cpu" if self.devices[0] == "cpu" else "cuda"

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'; False for wildcards and anything else."""
    h = host.strip("[]")
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False  # a host name: could resolve anywhere


MAX_TOKENS = 2  # the current token and the next one, during a rotation
MIN_TOKEN_BYTES = 32  # `openssl rand -hex 32` gives 64
GENERATE = "openssl rand -hex 32"
# Values this project has published as examples or placeholders: anyone could send them.
PLACEHOLDER_TOKENS = frozenset({
    "REPLACE-WITH-A-RANDOM-TOKEN-OF-32-OR-MORE-CHARACTERS",  # deploy/k8s/secret.yaml until it was removed
})


def parse_tokens(text: str, where: str) -> tuple[str, ...]:
    """One or two tokens, one per line ('#' comments and blank lines ignored); each at least
    MIN_TOKEN_BYTES long and none a published placeholder."""
    tokens = tuple(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    if not tokens:
        raise ServerConfigError(f"no token in {where}: generate one with `{GENERATE}`")
    if len(tokens) > MAX_TOKENS:
        raise ServerConfigError(f"{where} holds {len(tokens)} tokens; at most {MAX_TOKENS} (old and new, "
                                "while clients move over)")
    for t in tokens:
        if len(t.encode()) < MIN_TOKEN_BYTES:
            raise ServerConfigError(f"a token in {where} is too short ({len(t.encode())} bytes, need at least "
                                    f"{MIN_TOKEN_BYTES}): generate one with `{GENERATE}`")
        if t in PLACEHOLDER_TOKENS:
            raise ServerConfigError(f"{where} holds a published placeholder token, which anyone could send: "
                                    f"replace it with one from `{GENERATE}`")
    return tokens


def check_private(path: Path, what: str) -> None:
    """Refuse a secret file that users other than its owner may read or write (its mode, after
    symlinks: a mounted Kubernetes Secret is a link into a directory of its own)."""
    try:
        mode = path.stat().st_mode & 0o777
    except OSError as err:
        raise ServerConfigError(f"cannot read {what} {path}: {err.strerror}") from None
    if mode & 0o077:
        raise ServerConfigError(f"{what} {path} is open to other users (mode {mode:04o}): chmod 600 {path} "
                                "(Kubernetes: defaultMode 0400 on the Secret volume)")


def load_tokens(path: str | Path) -> tuple[str, ...]:
    """The tokens of the daemon's token file: one only its owner can read (``check_private``)."""
    p = Path(path)
    check_private(p, "token file")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise ServerConfigError(f"cannot read token file {p}: {err.strerror}") from None
    return parse_tokens(text, f"token file {p}")


def load_token(path: str | Path) -> str:
    """The first token of a token file."""
    return load_tokens(path)[0]
