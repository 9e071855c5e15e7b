"""Channels to daemons: TLS / mTLS credentials, keepalive matching the server, auth metadata."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import grpc

# Keepalive: the daemon accepts pings every >= 10 s (SERVER_MIN_PING_INTERVAL_MS); pinging
# every 30 s keeps NAT/LB state alive and detects a dead host within ~40 s, without the
# server answering GOAWAY "too_many_pings".
CLIENT_KEEPALIVE_TIME_MS = 30_000
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", CLIENT_KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    ("grpc.enable_retries", 0),  # the client re-dispatches itself, on another host
)


@dataclasses.dataclass(frozen=True)
class TlsConfig:
    """TLS to the daemons. root_ca: PEM of the CA that signed the daemon certificates
    (None = system roots); client_cert + client_key for mTLS; server_name overrides the
    name checked in the daemon certificate."""

    root_ca: str | Path | bytes | None = None
    client_cert: str | Path | bytes | None = None
    client_key: str | Path | bytes | None = None
    server_name: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.root_ca),
            private_key=_pem(self.client_key),
            certificate_chain=_pem(self.client_cert),
        )


def _pem(value: str | Path | bytes | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


def make_channel(target: str, tls: TlsConfig | bool | None = None) -> grpc.aio.Channel:
    options = list(CHANNEL_OPTIONS)
    if tls:
        cfg = tls if isinstance(tls, TlsConfig) else TlsConfig()
        if cfg.server_name:
            options.append(("grpc.ssl_target_name_override", cfg.server_name))
        return grpc.aio.secure_channel(target, cfg.credentials(), options=options)
    return grpc.aio.insecure_channel(target, options=options)


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def read_token_file(path: str | Path) -> str:
    return Path(path).read_text(encoding="utf-8").strip()
