"""The learner's side of the evaluation farm: owned local daemons, a client, bounded waits.

`Farm` submits (task, code) pairs to evalfarm daemons and hands results back by sample id:

* With no endpoints configured it starts `local_daemons` real `evalfarm serve` processes on
  loopback (CPU slots, or one slot per GPU when the host has NVIDIA GPUs and `device` asks for
  it), owns them, and stops them on `close()` (SIGTERM, then SIGKILL after a bounded wait).
* Every wait is bounded. A result that does not come within the caller's deadline is reported
  as LOST (never rewarded); if it arrives later it is dropped, never counted twice.
* One retry owner: the client (`evalfarm.client`) re-dispatches INFRA_ERROR results and lost
  connections to another daemon, `1 + max_resubmits` attempts in all, and counts each sample's
  deadline from its dispatch, not from when it was queued. What is still INFRA_ERROR after that
  comes back as such, and the trainer leaves it out of the update.
* The trainer sees an `Outcome` (the farm's verdicts plus LOST and PARSE_FAILURE), not strings.
  `farm.options` are validated when the farm is opened; `submit_many` sends a step's samples in
  a shuffled order (so the same tasks are not always last in the queue); the farm's capacity is
  read at start (`slots`), and `check_step_size` warns when a step has many more samples than
  the farm has slots.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import logging
import random
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from evalfarm.client import FarmClient, SampleResult
from evalfarm.client.channel import TlsConfig
from evalfarm.result import ScoreResult
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.verdict import Verdict

log = logging.getLogger(__name__)


class FarmError(RuntimeError):
    """The farm could not be started or reached, or its settings are invalid."""


class Outcome(enum.StrEnum):
    """What the trainer sees for one sample: the farm's verdict, or why there is none."""

    OK = Verdict.OK.value
    COMPILE_ERROR = Verdict.COMPILE_ERROR.value
    LOAD_ERROR = Verdict.LOAD_ERROR.value
    RUNTIME_ERROR = Verdict.RUNTIME_ERROR.value
    TIMEOUT = Verdict.TIMEOUT.value
    CUDA_FAULT = Verdict.CUDA_FAULT.value
    INCORRECT = Verdict.INCORRECT.value
    HACK_DETECTED = Verdict.HACK_DETECTED.value
    INFRA_ERROR = Verdict.INFRA_ERROR.value
    LOST = "LOST"  # no result within the learner's wait
    PARSE_FAILURE = "PARSE_FAILURE"  # the response had no code to score; never sent

    @property
    def infra(self) -> bool:
        """Not the candidate's fault: left out of the update, never rewarded."""
        return self in (Outcome.INFRA_ERROR, Outcome.LOST)


def validate_options(options: dict[str, Any]) -> None:
    """Raise FarmError for `farm.options` the farm would refuse (unknown names, bad values)."""
    from evalfarm.client.wire import config_from_pb, options_to_pb

    try:
        config_from_pb(options_to_pb(options), "cpu")
    except Exception as err:  # noqa: BLE001 - ConfigError, TypeError ...: the message says which
        raise FarmError(f"farm.options: {err}") from None


@dataclasses.dataclass(frozen=True)
class FarmSettings:
    endpoints: tuple[str, ...] = ()  # empty: start local daemons
    token_file: str | None = None
    tls_ca: str | None = None  # CA of the daemons' certificates: enables TLS
    tls_cert: str | None = None  # client certificate + key for mTLS
    tls_key: str | None = None
    tls_server_name: str | None = None
    local_daemons: int = 1
    local_device: str = "auto"  # "auto" (GPUs when present), "cpu" or "cuda"
    local_slots: int = 1  # CPU slots per local daemon
    local_cache_dir: str = ""  # local daemons' result + build cache; "" = <workdir>/farm-cache
    # "best": local daemons use the strong sandbox where this host has it, and otherwise start weak
    # with a warning (they score this run's own samples, on loopback, as `evalfarm score` does);
    # "strong": refuse to start without it, as a farm daemon does.
    local_sandbox: str = "best"
    options: dict[str, Any] = dataclasses.field(default_factory=dict)  # evalfarm ScoreConfig fields
    gpu_model: str = ""  # score every sample on this device model; "" = the first model per task
    # A sample's evaluation may run this long from its dispatch; past it the candidate is TIMEOUT
    # (rewarded as a failure: evalfarm.eval_budget), a daemon that does not answer is INFRA_ERROR.
    sample_deadline_s: float = 900.0
    max_resubmits: int = 2
    start_timeout_s: float = 120.0

    @classmethod
    def from_config(cls, cfg: Any) -> FarmSettings:
        return cls(
            endpoints=tuple(e for e in cfg.endpoints if e),
            token_file=cfg.token_file or None,
            tls_ca=cfg.tls_ca or None,
            tls_cert=cfg.tls_cert or None,
            tls_key=cfg.tls_key or None,
            tls_server_name=cfg.tls_server_name or None,
            local_daemons=int(cfg.local_daemons),
            local_device=str(cfg.local_device),
            local_slots=int(cfg.local_slots),
            local_cache_dir=str(cfg.local_cache_dir),
            local_sandbox=str(cfg.local_sandbox),
            options=dict(cfg.options),
            gpu_model=str(cfg.gpu_model or ""),
            sample_deadline_s=float(cfg.sample_deadline_s),
            max_resubmits=int(cfg.max_resubmits),
        )

    def __post_init__(self) -> None:
        validate_options(dict(self.options))
        if self.local_sandbox not in LOCAL_SANDBOX:
            raise FarmError(f"farm.local_sandbox must be one of {', '.join(LOCAL_SANDBOX)}, got {self.local_sandbox!r}")
        if self.max_resubmits < 0:
            raise FarmError(f"farm.max_resubmits must be >= 0, got {self.max_resubmits}")


def host_has_gpu() -> bool:
    from evalfarm.devices import list_gpus

    try:
        return bool(list_gpus())
    except Exception:  # noqa: BLE001 - no nvidia-smi, no driver: no GPU
        return False


LOCAL_SANDBOX = ("best", "strong")


def local_weak_sandbox(device: str, policy: str) -> bool:
    """Whether local daemons for ``device`` start with --allow-weak-sandbox: only where this host
    cannot give the strong sandbox (evalfarm.sandbox.isolation, the check the daemon itself makes) and
    ``policy`` is "best", which logs what is missing; "strong" raises FarmError with it instead."""
    from evalfarm.sandbox import isolation

    found = isolation.assess(device)
    if found.strong:
        return False
    if policy == "strong":
        raise FarmError(f"local farm (farm.local_sandbox = 'strong'): {found.refusal()}")
    log.warning("local farm: this run's candidates get a WEAK sandbox (%s); they run with your files and "
                "network in reach. Fix: %s; farm.local_sandbox = 'strong' refuses to start without it",
                "; ".join(found.missing), found.fix)
    return True


class LocalDaemons:
    """`evalfarm serve` processes on loopback, owned by this object (evalfarm.server.local)."""

    def __init__(self, count: int, *, device: str, slots: int, cache_dir: Path, log_dir: Path,
                 start_timeout_s: float = 120.0, kernelbench_root: str | None = None,
                 sandbox: str = "best") -> None:
        from evalfarm.server.local import LocalDaemon, LocalDaemonError

        if count < 1:
            raise FarmError("local_daemons must be >= 1 when no farm endpoints are configured")
        if device == "auto":
            device = "cuda" if host_has_gpu() else "cpu"
        self.device = device
        weak = local_weak_sandbox(device, sandbox)
        self.daemons: list[LocalDaemon] = []
        # Resolve the learner's own task set, not the built-in suite.
        args = ["--kernelbench-root", str(kernelbench_root)] if kernelbench_root else []
        try:
            for i in range(count):
                self.daemons.append(LocalDaemon(device=device, slots=slots, cache_dir=cache_dir,
                                                log_path=log_dir / f"daemon-{i}.log", args=args,
                                                start_timeout_s=start_timeout_s, allow_weak_sandbox=weak))
        except LocalDaemonError as err:
            self.stop()
            raise FarmError(f"local farm daemon {len(self.daemons)}: {err}") from None
        except BaseException:
            self.stop()
            raise
        log.info("started %d local farm daemon(s) on %s (%s)", count, ", ".join(self.endpoints), device)

    @property
    def endpoints(self) -> list[str]:
        return [d.endpoint for d in self.daemons]

    @property
    def procs(self) -> list[subprocess.Popen[str]]:
        return [d.proc for d in self.daemons]

    def stop(self, timeout_s: float = 30.0) -> None:
        from evalfarm.server.local import stop_all

        stop_all(self.daemons, timeout_s)
        self.daemons = []


@dataclasses.dataclass
class FarmOutcome:
    """The one result the trainer sees for a submitted sample."""

    sample_id: str
    verdict: Outcome  # a plain string is converted (and checked) on construction
    speedup: float | None = None
    detail: str = ""
    latency_s: float = 0.0
    attempts: int = 1
    cached: bool = False
    hack_reason: str = ""
    gpu_name: str = ""  # the device model that measured it ("" when nothing was measured)

    def __post_init__(self) -> None:
        self.verdict = Outcome(self.verdict)

    @property
    def ok(self) -> bool:
        return self.verdict is Outcome.OK and self.speedup is not None

    @property
    def infra(self) -> bool:
        """Not the candidate's fault: left out of the update, never rewarded."""
        return self.verdict.infra


@dataclasses.dataclass
class _Pending:
    submitted: float
    task_id: str = ""


class Farm:
    """Submit candidates and wait for their results with deadlines. Not thread-safe."""

    def __init__(self, settings: FarmSettings, workdir: Path, *, task_suite: str = "builtin",
                 task_hashes: dict[str, str] | None = None) -> None:
        """``task_suite`` ("builtin" or a KernelBench checkout) is what local daemons resolve task
        ids in; ``task_hashes`` (task id -> SHA-256 of its source) goes with every request, so a
        daemon that resolves an id to other content rejects it instead of scoring against it."""
        self.settings = settings
        self.task_hashes = dict(task_hashes or {})
        self._mismatch_logged: set[str] = set()
        self.local: LocalDaemons | None = None
        endpoints = list(settings.endpoints)
        if not endpoints:
            self.local = LocalDaemons(
                settings.local_daemons, device=settings.local_device, slots=settings.local_slots,
                cache_dir=Path(settings.local_cache_dir) if settings.local_cache_dir else workdir / "farm-cache",
                log_dir=workdir / "logs",
                start_timeout_s=settings.start_timeout_s,
                kernelbench_root=None if task_suite == "builtin" else task_suite,
                sandbox=settings.local_sandbox,
            )
            endpoints = self.local.endpoints
        self.shares_cpu_with_learner = self.local is not None and self.local.device == "cpu"
        token = Path(settings.token_file).read_text().strip() if settings.token_file else None
        tls = None
        if settings.tls_ca or settings.tls_cert:
            if bool(settings.tls_cert) != bool(settings.tls_key):
                raise FarmError("farm.tls_cert and farm.tls_key go together")
            tls = TlsConfig(root_ca=settings.tls_ca, client_cert=settings.tls_cert,
                            client_key=settings.tls_key, server_name=settings.tls_server_name)
        try:
            self.client = FarmClient(endpoints, token, tls, default_deadline_s=settings.sample_deadline_s,
                                     gpu_model=settings.gpu_model or None, max_attempts=1 + settings.max_resubmits)
        except BaseException as err:
            if self.local is not None:
                self.local.stop()
            raise FarmError(f"cannot reach the farm at {', '.join(endpoints)}: {err}") from err
        self.endpoints = endpoints
        self._pending: dict[str, _Pending] = {}  # sample id -> pending submission
        self._done: dict[str, FarmOutcome] = {}
        self._abandoned: set[str] = set()
        self.stats: dict[str, int] = {"submitted": 0, "lost": 0, "late_dropped": 0}
        self._warned_sizes: set[int] = set()
        self.slots = self._read_capacity()

    def _read_capacity(self) -> int:
        """Evaluation slots over the reachable daemons (0 when none answered yet)."""
        try:
            caps = self.client.capacity(timeout=min(10.0, self.settings.start_timeout_s))
        except Exception as err:  # noqa: BLE001 - capacity is advisory; the client keeps polling
            log.warning("could not read the farm's capacity: %s", err)
            return 0
        slots = sum(int(c.slots) for c in caps.values() if c is not None and not c.draining)
        log.info("farm: %d daemon(s) answered, %d evaluation slots", sum(c is not None for c in caps.values()), slots)
        return slots

    def check_step_size(self, samples: int, what: str = "rl.tasks_per_step x rl.group_size") -> bool:
        """Warn (once per size) when a step sends many more samples than the farm has slots.

        Returns False when it warned. The client queues what does not fit and starts each
        sample's deadline at dispatch, so nothing expires in its queue, but the step then takes
        about samples / slots evaluations back to back."""
        if self.slots <= 0 or samples <= 4 * self.slots or samples in self._warned_sizes:
            return True
        self._warned_sizes.add(samples)
        log.warning("a step sends %d samples to a farm with %d slots: about %d evaluations in a row "
                    "per slot; add farm GPUs or lower %s", samples, self.slots,
                    -(-samples // self.slots), what)
        return False

    # -- submission ------------------------------------------------------------------------
    def submit(self, sample_id: str, task_id: str, code: str, tags: dict[str, str] | None = None) -> None:
        if sample_id in self._pending or sample_id in self._done:
            raise ValueError(f"sample id {sample_id!r} was already submitted")
        self._pending[sample_id] = _Pending(time.monotonic(), task_id)
        task = pb.TaskRef(name=task_id, sha256=self.task_hashes.get(task_id, ""))
        self.client.submit(task, code, sample_id, options=self.settings.options,
                           tags=dict(tags or {}), deadline_s=self.settings.sample_deadline_s)
        self.stats["submitted"] += 1

    def submit_many(self, items: Iterable[tuple[str, str, str, dict[str, str]]], seed: int | str) -> list[str]:
        """Submit (sample id, task id, code, tags) items in an order shuffled by `seed`.

        Groups of one task would otherwise queue together in task order, and with a farm too
        small for the step the same tasks would be the ones waiting longest every time."""
        order = list(items)
        random.Random(str(seed)).shuffle(order)
        for sid, task_id, code, tags in order:
            self.submit(sid, task_id, code, tags)
        return [sid for sid, *_ in order]

    # -- results ---------------------------------------------------------------------------
    def wait(self, sample_ids: Sequence[str], timeout_s: float) -> dict[str, FarmOutcome]:
        """Results for `sample_ids`; those missing at the deadline come back as LOST."""
        want = list(sample_ids)
        deadline = time.monotonic() + timeout_s
        while any(s not in self._done for s in want):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                res = next(iter(self.client.results(timeout=min(remaining, 5.0))))
            except TimeoutError:
                continue
            except StopIteration:  # nothing outstanding at the client: the rest cannot come
                break
            self._on_result(res)
        out: dict[str, FarmOutcome] = {}
        for sid in want:
            if sid in self._done:
                out[sid] = self._done.pop(sid)
            else:
                pend = self._pending.pop(sid, None)
                self._abandoned.add(sid)
                self.stats["lost"] += 1
                out[sid] = FarmOutcome(sid, Outcome.LOST, detail=f"no result within {timeout_s:.0f}s",
                                       latency_s=time.monotonic() - pend.submitted if pend else 0.0)
        return out

    def _on_result(self, res: SampleResult) -> None:
        sid = res.sample_id
        if sid in self._abandoned:
            self.stats["late_dropped"] += 1
            self._abandoned.discard(sid)
            return
        pend = self._pending.pop(sid, None)
        if pend is None:  # pragma: no cover - a result for a finished sample: drop, never recount
            self.stats["late_dropped"] += 1
            return
        r: ScoreResult = res.result
        if res.error_code in ("FAILED_PRECONDITION", "INVALID_ARGUMENT"):
            # The request itself is refused (a task the farm resolves to other content, or does not
            # know): no attempt can help, and the run should hear it loudly, once per task.
            if pend.task_id not in self._mismatch_logged:
                self._mismatch_logged.add(pend.task_id)
                log.error("the farm refused task %s: %s", pend.task_id, r.detail.splitlines()[:1])
        hack = r.detail.splitlines()[0] if r.verdict is Verdict.HACK_DETECTED and r.detail else ""
        self._done[sid] = FarmOutcome(
            sample_id=sid, verdict=Outcome(r.verdict.value), speedup=r.speedup if r.ok else None,
            detail=r.detail[:2000], latency_s=time.monotonic() - pend.submitted,
            attempts=max(1, int(res.attempts)), cached=res.cached, hack_reason=hack, gpu_name=res.gpu_name,
        )

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self.local is not None:
                self.local.stop()
                self.local = None

    def __enter__(self) -> Farm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def one_model_per_group(outcomes: Sequence[FarmOutcome], groups: Sequence[Any]) -> list[bool]:
    """False for a result measured on another device model than the rest of its group.

    GRPO compares the rewards of a group with each other, so they must come from one GPU
    model. The client routes a task's samples to one model; this refuses any that slipped
    through (a group's model is the one most of its results were measured on).
    """
    by_group: dict[Any, collections.Counter[str]] = {}
    for out, g in zip(outcomes, groups, strict=True):
        if out.gpu_name:
            by_group.setdefault(g, collections.Counter())[out.gpu_name] += 1
    keep = []
    for out, g in zip(outcomes, groups, strict=True):
        models = by_group.get(g)
        keep.append(not out.gpu_name or models is None or out.gpu_name == models.most_common(1)[0][0])
    dropped = len(keep) - sum(keep)
    if dropped:
        log.warning("refusing %d result(s) measured on another GPU model than the rest of their group", dropped)
    return keep
