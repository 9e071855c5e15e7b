"""The daemon's settings, validated once at start-up."""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from pathlib import Path

DEFAULT_MAX_SOURCE_BYTES = 1 << 20


class ServerConfigError(ValueError):
    """The daemon cannot start with these settings; the message says why."""


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 50051
    devices: tuple[str, ...] = ("cpu",)  # one entry per slot: "cpu" or "cuda:N"
    gpu_names: tuple[str, ...] = ()  # one per slot in CUDA mode
    queue_limit: int = 64
    auth_token: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    metrics_port: int | None = None
    kernelbench_root: Path | None = None
    cache_dir: Path | None = None
    build_workers: int = 2
    max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES
    drain_timeout_s: float = 60.0
    max_eval_s: float = 1800.0  # hard bound on one evaluation, on top of the scorer's own timeouts
    host_label: str = dataclasses.field(default_factory=socket.gethostname)

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
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ServerConfigError("--tls-cert and --tls-key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ServerConfigError("--tls-client-ca needs --tls-cert and --tls-key")
        if self.auth_token is None and not is_loopback(self.host):
            raise ServerConfigError(
                f"refusing to listen on non-loopback address {self.host!r} without "
                "--auth-token-file: anyone who can reach the port could run code on this host"
            )

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


def load_token(path: str | Path) -> str:
    p = Path(path)
    try:
        token = p.read_text(encoding="utf-8").strip()
    except OSError as err:
        raise ServerConfigError(f"cannot read token file {p}: {err.strerror}") from None
    if len(token) < 16:
        raise ServerConfigError(f"token in {p} is too short (need at least 16 characters)")
    return token
