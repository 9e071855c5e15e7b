"""The daemon's lifecycle: build the gRPC server, serve, drain on SIGTERM, exit 0."""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import sys
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from evalfarm.judge import bytecode, interpreter
from evalfarm.sandbox import bubblewrap, cgroup, isolation, lifetime
from evalfarm.server import lenient
from evalfarm.server.auth import BearerTokenInterceptor
from evalfarm.server.cache import ResultCache
from evalfarm.server.config import ServerConfig, ServerConfigError
from evalfarm.server.metrics import Metrics
from evalfarm.server.reload import CertFiles, TokenFile
from evalfarm.server.service import Backend, FarmService, _version, default_backend
from evalfarm.server.slot_health import SlotState
from evalfarm.v1 import evalfarm_pb2 as pb

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["EvalFarm"].full_name


def slot_health_name(slot: int) -> str:
    """The health service name of one slot: SERVING in service, NOT_SERVING taken out."""
    return f"{SERVICE_NAME}/slot/{slot}"

# The server accepts client keepalive pings every >= 10 s; the client pings every 30 s.
SERVER_MIN_PING_INTERVAL_MS = 10_000
SERVER_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", SERVER_MIN_PING_INTERVAL_MS),
    ("grpc.http2.max_ping_strikes", 2),
    ("grpc.so_reuseport", 0),
)


class WeakSandbox(ServerConfigError):
    """Candidates cannot have the strong sandbox here and the daemon was not told to serve anyway."""


def check_sandbox(config: ServerConfig) -> isolation.Isolation:
    """The start-up check: the isolation every candidate of this daemon gets (``isolation.assess``,
    the same check its results' evidence reports). Raises WeakSandbox when it is weak and
    ``config.allow_weak_sandbox`` is off. When it is strong, every later build and evaluation of
    this daemon requires bubblewrap (``EVALFARM_SANDBOX=bubblewrap``), so none falls back silently."""
    found = isolation.assess(config.device_mode)
    if found.strong:
        os.environ[bubblewrap.MODE_ENV] = "bubblewrap"
        log.info("event=sandbox strong=true summary=%r", found.summary())
    elif not config.allow_weak_sandbox:
        raise WeakSandbox(found.refusal())
    else:
        log.warning("event=sandbox strong=false allowed=true summary=%r fix=%r", found.summary(), found.fix)
        print(f"evalfarm serve: WARNING: serving untrusted candidates with a weak sandbox (--allow-weak-sandbox): "
              f"{'; '.join(found.missing)}. Fix: {found.fix}", file=sys.stderr, flush=True)
    return found


def check_judge_bytecode(config: ServerConfig) -> None:
    """The start-up check of EVALFARM_JUDGE_BYTECODE (raises ServerConfigError for a bad value),
    and where this daemon's judges keep their bytecode (evalfarm.judge.bytecode), logged."""
    try:
        where = bytecode.judge_cache(config.device_mode)
    except bytecode.SettingError as err:
        raise ServerConfigError(str(err)) from None
    log.info("event=judge_bytecode dir=%r", where or "none: judges compile what they import from source")


def check_judge_interpreter() -> None:
    """The start-up check that this daemon's judges can import what every judge imports
    (evalfarm.judge.interpreter); ServerConfigError naming what is missing and where."""
    try:
        interpreter.require()
    except interpreter.JudgeInterpreterError as err:
        raise ServerConfigError(str(err)) from None


def _address(host: str, port: int) -> str:
    return f"[{host.strip('[]')}]:{port}" if ":" in host.strip("[]") else f"{host}:{port}"


class Daemon:
    def __init__(self, config: ServerConfig, backend: Backend | None = None, build_pool: Any = None) -> None:
        self.config = config
        # The real scoring backend runs candidates: first the sandbox check (raises WeakSandbox).
        # A backend given by the caller (tests' fakes) runs none, and is not checked.
        self.sandbox = check_sandbox(config) if backend is None else None
        if backend is None:
            check_judge_bytecode(config)
            check_judge_interpreter()
        self.metrics = Metrics(FarmService.slot_labels(config), version=_version(), mode=config.device_mode)
        self.tokens = TokenFile(config.auth_token_file) if config.auth_token_file is not None else None
        self.certs = (CertFiles(config.tls_cert, config.tls_key, config.tls_client_ca)
                      if config.tls_cert is not None and config.tls_key is not None else None)
        self._own_pool = False
        self.judges: Any = None  # judge processes started ahead of need (evalfarm.judge.standby)
        if backend is None:
            if build_pool is None:
                build_pool = self._make_build_pool()
            per_slot = config.standby_judges_per_slot
            window = config.task_window_candidates
            if per_slot > 0 or window > 1:
                from evalfarm.judge.standby import WarmJudges
                from evalfarm.judge.task_window import WindowSpec

                self.judges = WarmJudges(dict(collections.Counter(config.devices * per_slot)),
                                         hold_rounds=config.standby_hold,
                                         window=WindowSpec(window, config.task_window_idle_s))
                self.metrics.watch_warm_judges(self.judges.stats)
            backend = default_backend(self.judges)
        self.build_pool = build_pool
        if build_pool is not None and hasattr(build_pool, "stats"):
            self.metrics.watch_build_pool(build_pool.stats)
        cache_path = config.cache_dir / "results.sqlite" if config.cache_dir is not None else None
        self.cache = ResultCache(cache_path)
        self.service = FarmService(config, backend, self.metrics, self.cache, build_pool, sandbox=self.sandbox)
        self.health = health.aio.HealthServicer()
        self.service.on_slot_change = self._slot_changed
        self.server: grpc.aio.Server | None = None
        self.health_server: grpc.aio.Server | None = None
        self.health_port: int | None = None
        self._health_host = "127.0.0.1"
        self.port: int | None = None
        self._metrics_http: Any = None
        self._stop = asyncio.Event()

    def _make_build_pool(self) -> Any:
        try:
            from evalfarm.build import BuildPool
        except ImportError as err:
            log.warning("event=no_build_pool error=%r", err)
            return None
        cache_dir = self.config.cache_dir / "build" if self.config.cache_dir is not None else None
        self._own_pool = True
        return BuildPool(max_workers=self.config.build_workers, cache_dir=cache_dir)

    def _slot_changed(self, state: SlotState) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if state.in_service else health_pb2.HealthCheckResponse.NOT_SERVING
        asyncio.ensure_future(self.health.set(slot_health_name(state.index), status))
        # Readiness (the EvalFarm service name) follows whether any slot can take work.
        ready = health_pb2.HealthCheckResponse.SERVING if self.service.slots.in_service else health_pb2.HealthCheckResponse.NOT_SERVING
        asyncio.ensure_future(self.health.set(SERVICE_NAME, ready))

    def _max_message(self) -> int:
        return 2 * self.config.max_source_bytes + (1 << 20)

    async def start(self) -> int:
        cfg = self.config
        lifetime.sweep()  # files of evaluations whose daemon died (their run locks are free)
        cgroup.sweep()  # and the (empty) cgroups of their judges
        if self.judges is not None:
            self.judges.fill()  # the first candidates find judges that have paid their start-up
        interceptors = []
        if cfg.authenticated:
            tokens: Any = self.tokens.tokens if self.tokens is not None else cfg.auth_token
            interceptors.append(
                BearerTokenInterceptor(tokens, lambda _r: self.metrics.rejected.labels("auth").inc())
            )
        options = (
            *SERVER_OPTIONS,
            ("grpc.max_receive_message_length", self._max_message()),
            ("grpc.max_send_message_length", 64 << 20),
        )
        server = grpc.aio.server(interceptors=interceptors, options=options)
        lenient.add_servicer(self.service, server)  # undecodable bytes: INVALID_ARGUMENT, not UNKNOWN
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        address = _address(cfg.host, cfg.port)
        if self.certs is not None:  # re-read on every new handshake when the files change
            port = server.add_secure_port(address, self.certs.credentials())
        else:
            port = server.add_insecure_port(address)
        if port == 0:
            raise OSError(f"could not bind {address}")
        await server.start()
        self.server, self.port = server, port
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        for state in self.service.slot_states:
            await self.health.set(slot_health_name(state.index), health_pb2.HealthCheckResponse.SERVING)
        if cfg.health_port is not None:  # health only: no token, nothing a client could abuse
            hs = grpc.aio.server()
            health_pb2_grpc.add_HealthServicer_to_server(self.health, hs)
            health_host = "127.0.0.1" if not cfg.authenticated else "0.0.0.0"
            self._health_host = health_host
            self.health_port = hs.add_insecure_port(_address(health_host, cfg.health_port))
            await hs.start()
            self.health_server = hs
        if cfg.metrics_port is not None:
            addr = "127.0.0.1" if not cfg.authenticated else "0.0.0.0"
            self._metrics_http = self.metrics.serve(cfg.metrics_port, addr=addr)
        log.info(
            "event=listening address=%s port=%d slots=%d mode=%s queue_limit=%d auth=%s tls=%s metrics=%s health=%s",
            cfg.host, port, cfg.slots, cfg.device_mode, cfg.queue_limit,
            cfg.authenticated, cfg.tls, self.metrics_address or "off", self.health_address or "main port",
        )
        return port

    @property
    def metrics_address(self) -> str | None:
        """HOST:PORT of the /metrics endpoint, or None when it is off."""
        if self._metrics_http is None:
            return None
        host, port = self._metrics_http[0].server_address[:2]
        return f"{_address(str(host), int(port))}"

    @property
    def health_address(self) -> str | None:
        """HOST:PORT of the plaintext health-only server, or None when there is none."""
        if self.health_server is None or self.health_port is None:
            return None
        return _address(self._health_host, self.health_port)

    def request_stop(self) -> None:
        """Begin a graceful drain (what SIGTERM / SIGINT do)."""
        self._stop.set()

    async def serve_until_stopped(self) -> None:
        await self._stop.wait()
        await self.drain()

    async def drain(self) -> None:
        """Stop admitting, finish in-flight work up to the drain timeout, cancel the rest."""
        cfg = self.config
        log.info("event=drain_start active=%d timeout_s=%.1f", self.service._active, cfg.drain_timeout_s)
        self.service.start_drain()
        await self.health.enter_graceful_shutdown()  # every name, slots included, NOT_SERVING
        finished = await self.service.wait_idle(cfg.drain_timeout_s)
        if not finished:
            log.warning("event=drain_timeout cancelling=%d", self.service._active)
            self.service.abort_in_flight()
            await self.service.wait_idle(30.0)
        await self.service.wait_background(30.0)
        if self.server is not None:
            await self.server.stop(grace=5.0)  # lets the last results reach their clients
        if self.health_server is not None:
            await self.health_server.stop(grace=None)
        self.close()
        log.info("event=drain_done clean=%s", finished)

    def close(self) -> None:
        self.service.close()
        self.cache.close()
        if self._metrics_http is not None:
            server, thread = self._metrics_http
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
            self._metrics_http = None
        if self._own_pool and self.build_pool is not None:
            self.build_pool.close()
            self.build_pool = None
        if self.judges is not None:
            self.judges.close()
            self.judges = None


async def run_daemon(config: ServerConfig, ready: Any = None) -> int:
    daemon = Daemon(config)
    await daemon.start()
    loop = asyncio.get_running_loop()
    # Before announcing the port: a supervisor may send SIGTERM as soon as it reads it.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, daemon.request_stop)
    if ready is not None:
        ready(daemon)
    try:
        await daemon.serve_until_stopped()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0
