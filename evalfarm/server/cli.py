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
from typing import Any

from evalfarm.build.cache import DEFAULT_CACHE_DIR
from evalfarm.server.config import (
    ServerConfig,
    ServerConfigError,
    check_private,
    load_tokens,
)
from evalfarm.server.gpus import gpu_names, gpu_uuids, nvml_missing, parse_gpu_list
from evalfarm.server.logformat import FORMATS, setup_logging

log = logging.getLogger("evalfarm.server")

LISTENING_PREFIX = "evalfarm serve: listening on "
_LISTENING_RE = re.compile(r"listening on (.+?):(\d+)(?:;|$)")


def listening_line(host: str, port: int, metrics: str | None, health: str | None) -> str:
    """The line `evalfarm serve` prints on stdout once it serves: its address, then where its
    metrics and its plaintext health service are (or the flag that turns each on)."""
    return (f"{LISTENING_PREFIX}{host}:{port}; "
            f"metrics {f'http://{metrics}/metrics' if metrics else 'off (--metrics-port)'}; "
            f"health {health or 'on the main port (--health-port for a plaintext one)'}")


def listening_port(line: str) -> int | None:
    """The main port in a listening line (None for any other line)."""
    m = _LISTENING_RE.search(line.strip())
    return int(m.group(2)) if m and line.startswith(LISTENING_PREFIX) else None


def wait_for_listening_port(proc: subprocess.Popen[str], timeout: float) -> int | None:
    """The port a daemon started with ``--port 0`` printed on stdout, or None after timeout.

    For supervisors and tests that start ``evalfarm serve`` as a child with stdout piped.
    """
    found: list[int] = []

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            port = listening_port(line)
            if port is not None:
                found.append(port)
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    return found[0] if found else None

# Every serve setting, its default, and its help. Flags default to None so that a flag given
# on the command line can be told from one left out: command line > --config file > default.
# The daemon's own settings take their defaults from ServerConfig (one owner); the rest are the
# command line's.
_SERVER = ServerConfig()
DEFAULTS: dict[str, Any] = {
    "port": _SERVER.port, "host": _SERVER.host, "gpus": None, "device": None, "slots": 1,
    "queue_limit": _SERVER.queue_limit, "auth_token_file": None, "tls_cert": None, "tls_key": None,
    "tls_client_ca": None, "metrics_port": None, "health_port": None, "kernelbench_root": None,
    "cache_dir": str(DEFAULT_CACHE_DIR), "build_workers": _SERVER.build_workers, "warm_judges": _SERVER.warm_judges,
    "standby_hold": "on" if _SERVER.standby_hold else "off",
    "task_window": _SERVER.task_window, "task_window_idle": _SERVER.task_window_idle_s,
    "max_source_bytes": _SERVER.max_source_bytes, "drain_timeout": _SERVER.drain_timeout_s,
    "max_eval_seconds": _SERVER.max_eval_s, "log_level": "INFO", "log_format": "logfmt", "exit_with_parent": False,
    "fault_threshold": _SERVER.fault_threshold, "probe_interval": _SERVER.probe_interval_s,
    "allow_weak_sandbox": _SERVER.allow_weak_sandbox,
}


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    p = _WithDefaults(parser)
    p.add_argument("--config", default=None, metavar="FILE", help="TOML file of these settings (flags override it)")
    p.add_argument("--port", type=int, help="gRPC port; 0 picks a free one (printed on start)")
    p.add_argument("--host", help="address to bind (non-loopback needs a token)")
    p.add_argument("--gpus", help="'all' or a list like 0,1: one slot per GPU (default: all with --device cuda, "
                   "else none: CPU slots)")
    p.add_argument("--device", choices=("cpu", "cuda"),
                   help="cpu: CPU slots (testing); cuda: one slot per GPU of --gpus (default: cuda with --gpus, "
                        "else cpu)")
    p.add_argument("--slots", type=int, help="number of CPU slots (cpu mode)")
    p.add_argument("--queue-limit", type=int, help="requests waiting for a slot; more are refused (RESOURCE_EXHAUSTED)")
    p.add_argument("--auth-token-file", metavar="FILE",
                   help="file holding the bearer token (two lines during a rotation; re-read when it changes)")
    p.add_argument("--tls-cert", metavar="FILE", help="server certificate (PEM; re-read when it changes)")
    p.add_argument("--tls-key", metavar="FILE", help="server key (PEM)")
    p.add_argument("--tls-client-ca", metavar="FILE", help="require client certificates (mTLS) signed by this CA")
    p.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics over HTTP on this port (0: a free one)")
    p.add_argument("--health-port", type=int,
                   help="also serve the gRPC health service alone, in plaintext, on this port "
                        "(for kubelet gRPC probes when the main port uses TLS)")
    p.add_argument("--kernelbench-root", metavar="DIR",
                   help="resolve task names in this KernelBench checkout (default: the built-in suite)")
    p.add_argument("--cache-dir", metavar="DIR", help="cache root shared with `evalfarm score`: <dir>/build (compiled "
                   "extensions), <dir>/results.sqlite (results); $EVALFARM_CACHE_DIR sets its default")
    p.add_argument("--build-workers", type=int, help="compile pool size")
    p.add_argument("--warm-judges", type=int,
                   help="judge processes per slot started ahead of need (interpreter, torch, CUDA context and "
                        "both workers ready before a candidate arrives; each still serves one evaluation); "
                        "0 starts each on demand (default: 1 on GPU slots, 0 on CPU slots)")
    p.add_argument("--standby-hold", choices=("on", "off"),
                   help="on: while a standby judge of its device starts up, an evaluation checks its "
                        "rounds but sets their times aside (a start-up competes for CPU and the GPU); off: "
                        "those rounds are timed too (docs/benchmarks.md, \"2b. Daemon benchmark\")")
    p.add_argument("--task-window", type=int,
                   help="candidates one judge serves in a row for one task and settings: the task's set-up "
                        "(reference built and measured, float64 copy, memory plan) made once, fresh workers, "
                        "arenas and inputs for each candidate; 1 gives every evaluation its own judge "
                        "(default: 16 on GPU slots, 1 on CPU slots; docs/security.md, \"Task windows\")")
    p.add_argument("--task-window-idle", type=float, metavar="SECONDS",
                   help="how long a judge waits for its task's next candidate before it leaves")
    p.add_argument("--max-source-bytes", type=int,
                   help="largest candidate or task source accepted; a larger one is refused (INVALID_ARGUMENT)")
    p.add_argument("--drain-timeout", type=float, help="seconds to finish work on SIGTERM before cancelling it")
    p.add_argument("--max-eval-seconds", type=float,
                   help="the longest one evaluation may run from its slot: the deadline of a request that gives "
                        "none, and the cap of a longer one; past it the candidate is TIMEOUT")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR")
    p.add_argument("--log-format", choices=FORMATS, help="logfmt or json; UTC timestamps")
    p.add_argument("--fault-threshold", type=int,
                   help="CUDA_FAULT/TIMEOUT/INFRA_ERROR results in a row that take a slot out of "
                        "service until a known-good probe passes (0: never)")
    p.add_argument("--probe-interval", type=float, help="seconds before re-probing a failed slot")
    p.add_argument("--exit-with-parent", action="store_true", default=None,
                   help="drain and exit when the process that started the daemon dies")
    p.add_argument("--allow-weak-sandbox", action="store_true", default=None,
                   help="serve even where candidates cannot have the strong sandbox (bubblewrap namespaces and "
                        "an unprivileged uid; docs/operations.md, 'Isolation'): every result and `evalfarm "
                        "status` then say so. Without it the daemon refuses to start there")


class _WithDefaults:
    """Adds serve flags with their default from DEFAULTS (what resolve_args applies) said once in
    the help; the flags themselves default to None, so a flag given can be told from one left out."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser

    def add_argument(self, *names: str, **kwargs: Any) -> None:
        default = DEFAULTS.get(names[0].lstrip("-").replace("-", "_"))
        text = kwargs.get("help") or ""
        if default not in (None, False) and "(default" not in text:
            kwargs["help"] = f"{text} (default: {default})"
        self.parser.add_argument(*names, **kwargs)


def resolve_args(args: argparse.Namespace) -> argparse.Namespace:
    """Fill what the command line left out from --config, then from DEFAULTS."""
    from evalfarm.server.config_file import load_config_file

    file_values: dict[str, Any] = {}
    if getattr(args, "config", None):
        parser = argparse.ArgumentParser(add_help=False)
        add_serve_arguments(parser)
        file_values = load_config_file(args.config, parser)
    if getattr(args, "device", None) == "cpu" and getattr(args, "gpus", None) is None:
        file_values.pop("gpus", None)  # --device cpu on the command line overrides the file's GPUs
    merged = argparse.Namespace(**vars(args))
    for key, default in DEFAULTS.items():
        if getattr(merged, key, None) is None:
            setattr(merged, key, file_values.get(key, default))
    return merged


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The daemon's settings from parsed flags (and their --config file); errors name the field."""
    args = resolve_args(args)
    device = args.device or ("cuda" if args.gpus else _found_device())
    if device == "cpu":
        if args.gpus:
            raise ServerConfigError("--gpus and --device cpu exclude each other")
        if args.slots < 1:
            raise ServerConfigError("--slots must be >= 1")
        devices: tuple[str, ...] = ("cpu",) * args.slots
        names: tuple[str, ...] = ()
        uuids: tuple[str, ...] = ()
    else:
        available = gpu_names()
        try:
            idx = parse_gpu_list(args.gpus or "all", available)
        except ValueError as err:
            raise ServerConfigError(str(err)) from None
        devices = tuple(f"cuda:{i}" for i in idx)
        names = tuple(available[i] for i in idx)
        all_uuids = gpu_uuids()
        uuids = tuple(all_uuids[i] if i < len(all_uuids) else "" for i in idx)
        if len(set(names)) > 1:
            log.warning("event=mixed_gpu_models models=%s advice=%s", ",".join(sorted(set(names))),
                        "one daemon per GPU model (--gpus): a reward must not compare two models")
        missing = nvml_missing()
        if missing:
            log.warning("event=nvml_missing why=%s", missing)
            print(f"evalfarm serve: WARNING: NVML unavailable: {missing}", file=sys.stderr, flush=True)
    if args.auth_token_file:
        load_tokens(args.auth_token_file)  # a bad token file stops the start, with the reason
    for flag in ("tls_cert", "tls_key", "tls_client_ca", "kernelbench_root"):
        value = getattr(args, flag)
        if value is not None and not Path(value).exists():
            raise ServerConfigError(f"--{flag.replace('_', '-')}: {value} does not exist")
    if args.tls_key is not None:
        check_private(Path(args.tls_key), "TLS key")
    return ServerConfig(
        host=args.host,
        port=args.port,
        devices=devices,
        gpu_names=names,
        gpu_uuids=uuids,
        queue_limit=args.queue_limit,
        auth_token_file=Path(args.auth_token_file) if args.auth_token_file else None,
        tls_cert=Path(args.tls_cert) if args.tls_cert else None,
        tls_key=Path(args.tls_key) if args.tls_key else None,
        tls_client_ca=Path(args.tls_client_ca) if args.tls_client_ca else None,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        kernelbench_root=Path(args.kernelbench_root) if args.kernelbench_root else None,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        build_workers=args.build_workers,
        warm_judges=args.warm_judges,
        standby_hold=args.standby_hold == "on",
        task_window=args.task_window,
        task_window_idle_s=args.task_window_idle,
        max_source_bytes=args.max_source_bytes,
        drain_timeout_s=args.drain_timeout,
        max_eval_s=args.max_eval_seconds,
        fault_threshold=args.fault_threshold,
        probe_interval_s=args.probe_interval,
        allow_weak_sandbox=bool(args.allow_weak_sandbox),
    )


def _found_device() -> str:
    """The device mode when neither --device nor --gpus is given: every GPU the host has (one slot
    each), CPU slots only where it has none. Either way the choice is said once at start."""
    found = gpu_names()
    if found:
        note = f"{len(found)} GPU(s) found: one slot each (--device cpu for CPU slots instead)"
    else:
        note = "no NVIDIA GPU found (nvidia-smi lists none): CPU slots (--device cpu says so without this note)"
    log.info("event=device_chosen device=%s note=%r", "cuda" if found else "cpu", note)
    print(f"evalfarm serve: {note}", file=sys.stderr, flush=True)
    return "cuda" if found else "cpu"


def _watch_parent(parent: int, interval_s: float = 1.0) -> None:
    """SIGTERM ourselves (a graceful drain) once `parent` is gone, e.g. a learner killed with -9."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        logging.getLogger(__name__).warning("event=parent_exited parent=%d; draining", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def run_serve(args: argparse.Namespace) -> int:
    try:
        args = resolve_args(args)
    except ServerConfigError as err:
        print(f"evalfarm serve: error: {err}", file=sys.stderr)
        return 2
    setup_logging(args.log_level, args.log_format)
    try:
        config = config_from_args(args)
    except ServerConfigError as err:
        print(f"evalfarm serve: error: {err}", file=sys.stderr)
        return 2
    from evalfarm.server.daemon import run_daemon

    def announce(daemon: Any) -> None:
        print(listening_line(config.host, daemon.port, daemon.metrics_address, daemon.health_address), flush=True)

    if args.exit_with_parent:
        _watch_parent(os.getppid())

    try:
        return asyncio.run(run_daemon(config, ready=announce))
    except (OSError, ServerConfigError) as err:  # ServerConfigError: daemon.WeakSandbox, before any port
        print(f"evalfarm serve: error: {err}", file=sys.stderr)
        return 2
