"""Secrets that change while the daemon runs: bearer tokens and TLS certificates.

Both are files an operator (or Kubernetes, which swaps a mounted Secret's files atomically)
replaces in place; the daemon notices and uses the new content without a restart.

* `TokenFile`: one or two tokens (rotation: add the new token as a second line, move the
  clients over, remove the old line). Checked at most once a second, on the request path.
* `CertFiles`: the server certificate, key and (for mTLS) client CA, fed to grpcio's dynamic
  server credentials, which ask for them on every new TLS handshake.

A file that becomes unreadable or invalid is logged and the last good content kept: a
half-written file never locks every client out.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import grpc

from evalfarm.server.config import ServerConfigError, load_tokens

log = logging.getLogger(__name__)


def _stamp(paths: list[Path]) -> tuple[tuple[int, int, int], ...]:
    out = []
    for p in paths:
        try:
            st = p.stat()
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((0, 0, 0))
    return tuple(out)


class TokenFile:
    def __init__(self, path: Path, check_interval_s: float = 1.0) -> None:
        self.path = Path(path)
        self.check_interval_s = check_interval_s
        self._lock = threading.Lock()
        self._stamp = _stamp([self.path])
        self._tokens = load_tokens(self.path)  # a bad file at start is a start-up error
        self._checked = time.monotonic()
        self.reloads = 0

    def tokens(self) -> tuple[str, ...]:
        now = time.monotonic()
        if now - self._checked < self.check_interval_s:
            return self._tokens
        with self._lock:
            self._checked = now
            stamp = _stamp([self.path])
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._tokens = load_tokens(self.path)
                    self.reloads += 1
                    log.info("event=tokens_reloaded file=%s count=%d", self.path, len(self._tokens))
                except ServerConfigError as err:
                    log.error("event=tokens_reload_failed file=%s error=%s keeping=previous", self.path, err)
        return self._tokens


class CertFiles:
    """The fetcher behind grpc.dynamic_ssl_server_credentials."""

    def __init__(self, cert: Path, key: Path, client_ca: Path | None = None) -> None:
        self.cert, self.key, self.client_ca = Path(cert), Path(key), client_ca
        self._paths = [self.cert, self.key] + ([Path(client_ca)] if client_ca else [])
        self._lock = threading.Lock()
        self._stamp = _stamp(self._paths)
        self.initial = self._load()
        self.reloads = 0

    def _load(self) -> grpc.ServerCertificateConfiguration:
        try:
            key, cert = self.key.read_bytes(), self.cert.read_bytes()
            ca = self.client_ca.read_bytes() if self.client_ca else None
        except OSError as err:
            raise ServerConfigError(f"cannot read TLS file {err.filename}: {err.strerror}") from None
        if b"PRIVATE KEY" not in key or b"CERTIFICATE" not in cert or (ca is not None and b"CERTIFICATE" not in ca):
            raise ServerConfigError(f"TLS files {', '.join(map(str, self._paths))} are not PEM key/certificates")
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """A new configuration when the files changed, else None (grpcio keeps the current one)."""
        with self._lock:
            stamp = _stamp(self._paths)
            if stamp == self._stamp:
                return None
            self._stamp = stamp
            try:
                config = self._load()
            except ServerConfigError as err:
                log.error("event=tls_reload_failed error=%s keeping=previous", err)
                return None
            self.reloads += 1
            log.info("event=tls_reloaded cert=%s", self.cert)
            return config

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self.initial, self.fetch, require_client_authentication=self.client_ca is not None
        )
