"""Multi-host start-up: `maybe_initialize_distributed(cfg)` wraps `jax.distributed.initialize`.

Resolution order for each setting: explicit config field, then environment variable:

    LEARNER_COORDINATOR_ADDRESS  host:port of process 0 (alias JAX_COORDINATOR_ADDRESS)
    LEARNER_NUM_PROCESSES        total processes        (alias JAX_NUM_PROCESSES)
    LEARNER_PROCESS_ID           this process's rank    (alias JAX_PROCESS_ID)
    LEARNER_LOCAL_DEVICE_IDS     optional comma list of local device ids

`mode`: "off" never initialises; "on" always (JAX auto-detects missing values on TPU pods,
SLURM, Open MPI, ...); "auto" (default) initialises when a coordinator/num_processes > 1 is
configured, or when running under SLURM with more than one task, or on a multi-host Cloud TPU
(TPU_WORKER_HOSTNAMES lists more than one host). Single host: a no-op returning False.

A process that stops sending heartbeats for `heartbeat_timeout_s` is dead to JAX's coordination
service, which then stops every other process with an error naming it (a process killed while
the others sit in a collective makes that collective fail at once); `wait_timeout_s` bounds how long
a process waits for process 0's farm results and decisions (`learner.runtime.controller`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Literal

import jax

from learner.runtime import controller

log = logging.getLogger(__name__)

_initialized = False


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    mode: Literal["auto", "on", "off"] = "auto"
    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    local_device_ids: tuple[int, ...] | None = None
    initialization_timeout_s: int = 300
    heartbeat_timeout_s: int = 100  # JAX's default
    wait_timeout_s: float = 0.0  # 0: learner.runtime.controller's default


def distributed_config(cfg: Any) -> DistributedConfig:
    """`DistributedConfig` from a run config's `distributed` section (absent: all defaults).

    `wait_timeout_s` = 0 becomes `farm.wait_timeout_s` + 900 s: process 0 may start the farm and
    wait that long for a step's results while the others wait for them."""
    if "distributed" not in cfg:
        return DistributedConfig()
    d = cfg.distributed
    wait = float(d.get("wait_timeout_s", 0.0))
    if wait <= 0 and "farm" in cfg:
        wait = float(cfg.farm.wait_timeout_s) + 900.0
    return DistributedConfig(
        mode=str(d.mode),  # type: ignore[arg-type]
        coordinator_address=str(d.coordinator_address) or None,
        num_processes=int(d.num_processes) or None,
        process_id=None if int(d.process_id) < 0 else int(d.process_id),
        heartbeat_timeout_s=int(d.get("heartbeat_timeout_s", 100)),
        wait_timeout_s=wait,
    )


def is_controller() -> bool:
    """Process 0 owns the farm session, the exemplar database and metrics (one controller)."""
    return controller.is_controller()


def _env(*names: str) -> str | None:
    for n in names:
        v = os.environ.get(n)
        if v:
            return v
    return None


def _resolved(cfg: DistributedConfig) -> DistributedConfig:
    num = cfg.num_processes
    if num is None and (v := _env("LEARNER_NUM_PROCESSES", "JAX_NUM_PROCESSES")):
        num = int(v)
    pid = cfg.process_id
    if pid is None and (v := _env("LEARNER_PROCESS_ID", "JAX_PROCESS_ID")):
        pid = int(v)
    local = cfg.local_device_ids
    if local is None and (v := _env("LEARNER_LOCAL_DEVICE_IDS")):
        local = tuple(int(x) for x in v.split(","))
    return dataclasses.replace(
        cfg,
        coordinator_address=cfg.coordinator_address
        or _env("LEARNER_COORDINATOR_ADDRESS", "JAX_COORDINATOR_ADDRESS"),
        num_processes=num,
        process_id=pid,
        local_device_ids=local,
    )


def _cluster_detected() -> bool:
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return True
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES", "")
    return len([h for h in hosts.split(",") if h]) > 1


def should_initialize(cfg: DistributedConfig) -> bool:
    if cfg.mode == "off":
        return False
    if cfg.mode == "on":
        return True
    r = _resolved(cfg)
    if r.coordinator_address or (r.num_processes or 1) > 1:
        return True
    return _cluster_detected()


def maybe_initialize_distributed(cfg: DistributedConfig | None = None) -> bool:
    """Call `jax.distributed.initialize` when configured; must run before any other JAX call.

    Returns True when this process is part of a multi-process job (idempotent).
    """
    global _initialized
    cfg = cfg or DistributedConfig()
    if cfg.wait_timeout_s > 0:
        controller.set_wait_timeout(cfg.wait_timeout_s)
    if _initialized:
        return True
    if not should_initialize(cfg):
        log.debug("single-host run; jax.distributed not initialised")
        return False
    r = _resolved(cfg)
    log.info(
        "jax.distributed.initialize(coordinator=%s, num_processes=%s, process_id=%s)",
        r.coordinator_address, r.num_processes, r.process_id,
    )
    jax.distributed.initialize(
        coordinator_address=r.coordinator_address,
        num_processes=r.num_processes,
        process_id=r.process_id,
        local_device_ids=list(r.local_device_ids) if r.local_device_ids else None,
        initialization_timeout=r.initialization_timeout_s,
        heartbeat_timeout_seconds=r.heartbeat_timeout_s,
    )
    _initialized = True
    for handler in logging.getLogger().handlers:  # say which process wrote each line
        fmt = handler.formatter._fmt if handler.formatter is not None and handler.formatter._fmt else "%(message)s"
        handler.setFormatter(logging.Formatter(f"[p{jax.process_index()}] {fmt}"))
    log.info("process %d of %d", jax.process_index(), jax.process_count())
    return True


def leave_job(code: int, message: str) -> None:
    """End this process of a multi-process job at once with `code`, after saying why on stderr.

    A normal exit would wait in JAX's shutdown barrier for peers that may be dead or stuck in a
    collective this process left; leaving at once stops this process's heartbeats instead, so the
    coordination service stops the others within `heartbeat_timeout_s` (a peer blocked in a
    collective with this process fails at once)."""
    import sys

    print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    logging.shutdown()
    os._exit(code)
