"""`evalfarm serve`: argument parsing and start-up (called from evalfarm.cli)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from evalfarm.server.config import (
    DEFAULT_MAX_SOURCE_BYTES,
    ServerConfig,
    ServerConfigError,
    load_token,
)
from evalfarm.server.gpus import gpu_names, parse_gpu_list

log = logging.getLogger("evalfarm.server")

LISTENING_PREFIX = "evalfarm serve: listening on "


def wait_for_listening_port(proc: subprocess.Popen[str], timeout: float) -> int | None:
    """The port a daemon started with ``--port 0`` printed on stdout, or None after timeout.

    For supervisors and tests that start ``evalfarm serve`` as a child with stdout piped.
    """
    found: list[int] = []

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.search(r"listening on .*:(\d+)$", line.strip())
            if m:
                found.append(int(m.group(1)))
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    return found[0] if found else None

def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.add_argument("--port", type=int, default=50051, help="0 picks a free port (printed on start)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (non-loopback needs a token)")
    p.add_argument("--gpus", default=None, help="'all' or a list like 0,1: one slot per GPU")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="cpu: CPU slots (testing)")
    p.add_argument("--slots", type=int, default=1, help="number of CPU slots (cpu mode)")
    p.add_argument("--queue-limit", type=int, default=64, help="requests waiting for a slot")
    p.add_argument("--auth-token-file", default=None, help="file holding the bearer token")
    p.add_argument("--tls-cert", default=None)
    p.add_argument("--tls-key", default=None)
    p.add_argument("--tls-client-ca", default=None, help="require client certificates (mTLS)")
    p.add_argument("--metrics-port", type=int, default=None, help="Prometheus /metrics port")
    p.add_argument("--kernelbench-root", default=None, help="resolve KernelBench task ids")
    from evalfarm.build.cache import DEFAULT_CACHE_DIR

    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR),
                   help="cache root shared with `evalfarm score`: <dir>/build (compiled extensions), "
                        "<dir>/results.sqlite (results); $EVALFARM_CACHE_DIR sets the default")
    p.add_argument("--build-workers", type=int, default=2, help="compile pool size")
    p.add_argument("--max-source-bytes", type=int, default=DEFAULT_MAX_SOURCE_BYTES)
    p.add_argument("--drain-timeout", type=float, default=60.0, help="seconds to finish work on SIGTERM")
    p.add_argument("--max-eval-seconds", type=float, default=1800.0, help="hard limit per evaluation")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="drain and exit when the process that started the daemon dies")


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    device = args.device or ("cuda" if args.gpus else "cpu")
    if device == "cpu":
        if args.gpus:
            raise ServerConfigError("--gpus and --device cpu exclude each other")
        if args.slots < 1:
            raise ServerConfigError("--slots must be >= 1")
        devices: tuple[str, ...] = ("cpu",) * args.slots
        names: tuple[str, ...] = ()
    else:
        available = gpu_names()
        try:
            idx = parse_gpu_list(args.gpus or "all", available)
        except ValueError as err:
            raise ServerConfigError(str(err)) from None
        devices = tuple(f"cuda:{i}" for i in idx)
        names = tuple(available[i] for i in idx)
    token = load_token(args.auth_token_file) if args.auth_token_file else None
    for flag in ("tls_cert", "tls_key", "tls_client_ca", "kernelbench_root"):
        value = getattr(args, flag)
        if value is not None and not Path(value).exists():
            raise ServerConfigError(f"--{flag.replace('_', '-')}: {value} does not exist")
    return ServerConfig(
        host=args.host,
        port=args.port,
        devices=devices,
        gpu_names=names,
        queue_limit=args.queue_limit,
        auth_token=token,
        tls_cert=Path(args.tls_cert) if args.tls_cert else None,
        tls_key=Path(args.tls_key) if args.tls_key else None,
        tls_client_ca=Path(args.tls_client_ca) if args.tls_client_ca else None,
        metrics_port=args.metrics_port,
        kernelbench_root=Path(args.kernelbench_root) if args.kernelbench_root else None,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        build_workers=args.build_workers,
        max_source_bytes=args.max_source_bytes,
        drain_timeout_s=args.drain_timeout,
        max_eval_s=args.max_eval_seconds,
    )


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, str(level).upper(), logging.INFO),
        format="ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
        stream=sys.stderr,
        force=True,
    )


def _watch_parent(parent: int, interval_s: float = 1.0) -> None:
    """SIGTERM ourselves (a graceful drain) once `parent` is gone, e.g. a learner killed with -9."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        logging.getLogger(__name__).warning("event=parent_exited parent=%d; draining", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def run_serve(args: argparse.Namespace) -> int:
    _setup_logging(getattr(args, "log_level", "INFO"))
    try:
        config = config_from_args(args)
    except ServerConfigError as err:
        print(f"evalfarm serve: error: {err}", file=sys.stderr)
        return 2
    from evalfarm.server.daemon import run_daemon

    def announce(daemon: object) -> None:
        port = getattr(daemon, "port", None)
        print(f"{LISTENING_PREFIX}{config.host}:{port}", flush=True)

    if getattr(args, "exit_with_parent", False):
        _watch_parent(os.getppid())

    try:
        return asyncio.run(run_daemon(config, ready=announce))
    except OSError as err:
        print(f"evalfarm serve: error: {err}", file=sys.stderr)
        return 2
