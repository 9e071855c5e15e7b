"""AsyncFarmClient: spread candidates over many daemons and get exactly one result each.

- Dispatch by credit: each daemon may hold `slots + min(queue_allowance + build_workers,
  queue_limit)` of this client's requests (the daemon builds admitted candidates ahead, so one
  more per build worker keeps its compile pool busy), less what other clients are running there
  (from Capacity, polled every `poll_interval_s`). The daemon with the most credit gets the
  next job.
- Every submitted sample id gets exactly one final SampleResult: INFRA_ERROR results and
  lost connections are retried on another daemon (up to `max_attempts`), a daemon that
  dies has everything in flight re-dispatched, and nothing hangs: an evaluation that runs past
  its deadline is TIMEOUT (a verdict, the candidate's slowness: evalfarm.eval_budget), and a
  call the daemon does not answer in time is an INFRA_ERROR "deadline exceeded" result.
- Deadlines count from dispatch, not from submission: a sample waiting in this client's
  queue (all daemons busy) or in a daemon's queue does not burn its `deadline_s`. Each
  dispatch sends `deadline_s` to the daemon, which counts it from when a slot starts the
  evaluation; the call itself is bounded by `deadline_s + queue_wait_s + grace + rpc_overhead_s`
  from when it is sent (`queue_wait_s`: how long it may wait in the daemon's queue; by
  default `(1 + queue_allowance) * deadline_s`). A sample that waits here while no daemon
  it could go to is reachable fails after `deadline_s` of that ("no daemon available").
- Identical submissions (same task, source and options) share one evaluation; the result
  is fanned out to every sample id.
- Outlier scores (evalfarm.reverify: > 3x, or > 2x the best accepted so far for the task)
  are re-measured before they are accepted, with the merge rules of evalfarm.reverify. The
  re-measurement is marked `reverification` on the wire, so the daemon runs it ahead of its
  queued work, and this client dispatches it ahead of its own queue. It goes to another
  daemon with the same GPU model when one is up, else to the same daemon. The client is the
  only re-verifier: its requests carry reverify_above=0 (a caller's `reverify_above` option
  becomes this client's threshold); in-process scoring (`evalfarm.score`) re-verifies by
  itself with the same rule.
- Endpoints may be DNS names (`dns:///name:port`: every A/AAAA record is a daemon) or an
  endpoints file (`file:///path`), re-resolved every `discovery_interval_s`
  (evalfarm.client.discovery). A daemon that appears is used; one that vanishes is drained
  from the dispatcher and its work in flight is sent elsewhere (not counted as an attempt).
- One GPU model per reward: all samples of a task go to daemons of one device model
  (`gpu_model`, or the first model a task is dispatched to when `route_by_model`), so the
  rewards of a group are comparable; a re-verification runs on the same model.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import heapq
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any, Unpack

import grpc

from evalfarm import reverify
from evalfarm.client.channel import TlsConfig, auth_metadata, make_channel
from evalfarm.client.discovery import Discovery, Resolver
from evalfarm.client.submission import Submission, SubmitFields, TaskArg
from evalfarm.client.wire import options_to_pb, result_from_pb
from evalfarm.eval_budget import DEADLINE_GRACE_S
from evalfarm.infra_cause import InfraCause
from evalfarm.result import ScoreResult
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc
from evalfarm.verdict import Verdict

log = logging.getLogger(__name__)

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN,
                       grpc.StatusCode.INTERNAL, grpc.StatusCode.ABORTED})



@dataclasses.dataclass
class SampleResult:
    """The one final result for a sample id."""

    sample_id: str
    result: ScoreResult
    host: str = ""
    gpu_name: str = ""  # the device model it was measured on (the routing model)
    endpoint: str = ""
    gpu_uuid: str = ""
    slot: int = -1  # the daemon's slot index (-1: cached or never ran)
    cached: bool = False  # answered from a daemon's or this client's cache
    deduped: bool = False  # shared an evaluation with another sample id
    attempts: int = 0
    error_code: str | None = None  # gRPC status when the request itself was rejected
    tags: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return self.result.verdict

    @property
    def speedup(self) -> float | None:
        return self.result.speedup

    def to_dict(self) -> dict[str, Any]:
        out = self.result.to_dict()
        out.update(sample_id=self.sample_id, host=self.host, gpu_name=self.gpu_name, cached=self.cached)
        if self.gpu_uuid:
            out["gpu_uuid"] = self.gpu_uuid
        if self.error_code:
            out["error_code"] = self.error_code
        return out


@dataclasses.dataclass
class _Endpoint:
    target: str
    channel: grpc.aio.Channel
    stub: pb_grpc.EvalFarmStub
    slots: int = 1
    queue_limit: int = 0
    external: int = 0  # work on the daemon that is not ours, as of the last poll
    inflight: int = 0  # our requests on it now
    up: bool = False
    draining: bool = False
    host: str = ""
    backoff_until: float = 0.0
    polled: bool = False
    device_mode: str = ""  # "cuda" | "cpu", from Capacity
    gpu_names: tuple[str, ...] = ()
    gpu_model: str = ""  # the one model of its slots ("" when mixed or unknown)
    removed: bool = False  # gone from discovery: no new work
    build_workers: int = 0  # builds it runs ahead of its slots, from Capacity

    def same_model(self, gpu_name: str) -> bool:
        """Whether this daemon has the device model a result was measured on."""
        if self.device_mode == "cpu":
            return gpu_name == "cpu"
        return bool(gpu_name) and gpu_name in self.gpu_names

    def credits(self, allowance: int) -> int:
        """Requests it may take now: its slots, plus `allowance` queued per daemon and one queued
        per build worker (the daemon builds queued candidates ahead), within its queue limit."""
        return self.slots + min(allowance + self.build_workers, self.queue_limit) - self.inflight - self.external

    def usable(self, now: float) -> bool:
        return self.up and not self.draining and not self.removed and now >= self.backoff_until


@dataclasses.dataclass
class _Job:
    key: str
    task: pb.TaskRef
    task_key: str
    request: pb.ScoreRequest
    samples: list[tuple[str, dict[str, str]]]
    deadline_s: float  # per dispatch: the daemon counts it from when a slot starts the evaluation
    reverify_above: float = reverify.REVERIFY_ABOVE  # this client's threshold (0: no re-verification)
    deadline: float | None = None  # loop time bounding the call in flight; None while waiting here
    unavailable_since: float | None = None  # loop time since when no daemon it could go to is up
    attempts: int = 0
    tried: set[str] = dataclasses.field(default_factory=set)
    finished: bool = False
    rpc: asyncio.Task[Any] | None = None
    timer: asyncio.TimerHandle | None = None
    parent: _Job | None = None  # set on a re-verification job
    first: SampleResult | None = None  # the score being re-verified (on the re-verification job)
    same_daemon: bool = False
    last_error: str = ""
    endpoint: str = ""  # where the call in flight went


def _model_of(cap: pb.CapacityResponse) -> str:
    """A daemon's one device model from an older Capacity reply without gpu_model."""
    if cap.device_mode == "cpu":
        return "cpu"
    names = set(cap.gpu_names)
    return names.pop() if len(names) == 1 else ""


def _task_ref(task: str | pb.TaskRef | tuple[str, str]) -> pb.TaskRef:
    """A task name ("L1/1"), a TaskRef, or (source, name) for a reference given inline."""
    if isinstance(task, pb.TaskRef):
        return task
    if isinstance(task, tuple):
        source, name = task
        return pb.TaskRef(source=pb.TaskSource(source=source.encode("utf-8"), name=name))
    return pb.TaskRef(name=task)


class AsyncFarmClient:
    def __init__(
        self,
        endpoints: Iterable[str],
        token: str | None = None,
        tls: TlsConfig | bool | None = None,
        *,
        queue_allowance: int = 2,
        max_attempts: int = 3,
        default_deadline_s: float = 900.0,
        poll_interval_s: float = 1.0,
        rpc_overhead_s: float = 0.5,
        queue_wait_s: float | None = None,
        reverify: bool = True,
        on_result: Callable[[SampleResult], None] | None = None,
        gpu_model: str | None = None,
        route_by_model: bool = True,
        resolver: Resolver | None = None,
        discovery_interval_s: float = 30.0,
    ) -> None:
        targets = list(dict.fromkeys(endpoints))
        if not targets:
            raise ValueError("need at least one endpoint")
        self._discovery = Discovery(targets, resolver)  # raises on a malformed spec
        self.discovery_interval_s = discovery_interval_s
        self.gpu_model = gpu_model or None
        self.route_by_model = route_by_model
        self._task_model: dict[str, str] = {}  # task -> the model its samples are scored on
        self._targets = targets
        self._token = token
        self._tls = tls
        self._metadata = auth_metadata(token)
        self.queue_allowance = queue_allowance
        self.max_attempts = max_attempts
        self.default_deadline_s = default_deadline_s
        self.poll_interval_s = poll_interval_s
        self.rpc_overhead_s = rpc_overhead_s
        self.queue_wait_s = queue_wait_s
        self.reverify = reverify
        self._on_result = on_result
        self._endpoints: list[_Endpoint] = []
        # Jobs waiting to be sent: (0 for a re-verification else 1, sequence, job), a heap.
        self._waiting: list[tuple[int, int, _Job]] = []
        self._seq = itertools.count()
        self._credit = asyncio.Event()  # set when credit frees up or a job is queued
        self._inflight_jobs: dict[str, _Job] = {}  # dedupe key -> job
        self._completed: collections.OrderedDict[str, SampleResult] = collections.OrderedDict()
        self._futures: dict[str, asyncio.Future[SampleResult]] = {}
        self._streamed: set[str] = set()  # sample ids whose result goes to results()
        self._out: asyncio.Queue[SampleResult] = asyncio.Queue()
        self._outstanding = 0  # streamed samples without a delivered result
        self._best: dict[str, float] = {}
        self._children: dict[str, _Job] = {}  # parent key -> its re-verification job
        self._tasks: list[asyncio.Task[Any]] = []
        self._rpcs: set[asyncio.Task[Any]] = set()
        self._ids = itertools.count()
        self._started = False
        self._closed = False
        self.stats = collections.Counter[str]()

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self, wait_s: float = 5.0) -> AsyncFarmClient:
        if self._started:
            return self
        for target in await self._discovery.resolve():
            self._add_endpoint(target)
        self._started = True
        await asyncio.gather(*(self._poll_one(ep) for ep in self._endpoints))
        self._tasks.append(asyncio.ensure_future(self._poll_loop()))
        self._tasks.append(asyncio.ensure_future(self._dispatch_loop()))
        if self._discovery.dynamic:
            self._tasks.append(asyncio.ensure_future(self._discovery_loop()))
        if not any(ep.up for ep in self._endpoints) and wait_s > 0:
            log.warning("event=no_daemon_up endpoints=%s", ",".join(self._targets))
        return self

    async def __aenter__(self) -> AsyncFarmClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Cancel what is in flight (each pending sample gets an INFRA_ERROR result) and close."""
        if self._closed:
            return
        self._closed = True
        for job in list(self._inflight_jobs.values()):
            self._deliver(job, self._infra_result(job, "client closed"))
        for task in [*self._tasks, *self._rpcs]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._rpcs, return_exceptions=True)
        for ep in self._endpoints:
            await ep.channel.close(grace=None)

    # -- discovery -----------------------------------------------------------------------
    def _add_endpoint(self, target: str) -> _Endpoint:
        ch = make_channel(target, self._tls)
        ep = _Endpoint(target, ch, pb_grpc.EvalFarmStub(ch))
        self._endpoints.append(ep)
        return ep

    async def rediscover(self) -> tuple[list[str], list[str]]:
        """Resolve the endpoint specs again: (added, removed) daemon addresses."""
        found = await self._discovery.resolve()
        current = {ep.target: ep for ep in self._endpoints}
        added = [t for t in found if t not in current]
        removed = [ep for t, ep in current.items() if t not in set(found)]
        new = [self._add_endpoint(t) for t in added]
        for ep in removed:
            self._remove_endpoint(ep)
        if new:
            log.info("event=daemons_discovered added=%s", ",".join(added))
            await asyncio.gather(*(self._poll_one(ep) for ep in new))
        self._credit.set()
        return added, [ep.target for ep in removed]

    def _remove_endpoint(self, ep: _Endpoint) -> None:
        """A daemon gone from discovery: no new work; its calls in flight go elsewhere."""
        ep.removed, ep.up = True, False
        self._endpoints.remove(ep)
        moved = 0
        jobs = [*self._inflight_jobs.values(), *self._children.values()]
        for job in jobs:
            if job.finished or job.endpoint != ep.target or job.rpc is None or job.rpc.done():
                continue
            job.rpc.cancel()
            job.rpc = None
            job.attempts -= 1  # not the candidate's fault: it does not use up an attempt
            job.tried.discard(ep.target)
            self._push(job)
            moved += 1
        self.stats["daemons_removed"] += 1
        self.stats["redispatched_on_removal"] += moved
        log.warning("event=daemon_removed endpoint=%s redispatched=%d", ep.target, moved)
        self._tasks.append(asyncio.ensure_future(ep.channel.close(grace=None)))

    async def _discovery_loop(self) -> None:
        while True:
            await asyncio.sleep(self.discovery_interval_s)
            try:
                await self.rediscover()
            except Exception:  # noqa: BLE001 - discovery must keep running
                log.exception("event=discovery_failed")

    @property
    def targets(self) -> list[str]:
        """The daemon addresses in use now."""
        return [ep.target for ep in self._endpoints]

    # -- capacity ------------------------------------------------------------------------
    async def _poll_one(self, ep: _Endpoint) -> pb.CapacityResponse | None:
        try:
            cap = await ep.stub.Capacity(pb.CapacityRequest(), timeout=2.0, metadata=self._metadata)
        except grpc.aio.AioRpcError as err:
            if ep.up:
                log.warning("event=daemon_down endpoint=%s code=%s", ep.target, err.code().name)
            ep.up = False
            return None
        except asyncio.CancelledError:
            # Discovery removed the daemon while it was being asked: closing its channel cancels
            # the call, not this task. A cancellation of the task itself (the client closing)
            # still ends it.
            task = asyncio.current_task()
            if ep.removed and (task is None or not task.cancelling()):
                return None
            raise
        was_up = ep.up
        ep.slots, ep.queue_limit, ep.draining, ep.host = cap.slots, cap.queue_limit, cap.draining, cap.host
        ep.device_mode, ep.gpu_names = cap.device_mode, tuple(cap.gpu_names)
        ep.gpu_model = cap.gpu_model or _model_of(cap)
        ep.build_workers = cap.build_workers
        if cap.slot_status:  # slots out of service take no work: credit from those in service
            ep.slots = max(0, cap.slots - cap.out_of_service)
        ep.external = max(0, cap.running + cap.queue_depth - ep.inflight)
        ep.up, ep.polled = True, True
        if not was_up:
            log.info("event=daemon_up endpoint=%s host=%s slots=%d", ep.target, ep.host, ep.slots)
        self._credit.set()
        return cap

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            await asyncio.gather(*(self._poll_one(ep) for ep in list(self._endpoints)))
            self._check_unavailable()

    async def capacity(self) -> dict[str, pb.CapacityResponse | None]:
        """The latest Capacity of every endpoint in use (None when unreachable); a daemon that
        discovery removes meanwhile is left out."""
        endpoints = list(self._endpoints)  # discovery may change the list while they answer
        caps = await asyncio.gather(*(self._poll_one(ep) for ep in endpoints))
        return {ep.target: cap for ep, cap in zip(endpoints, caps, strict=True) if not ep.removed}

    # -- submission ----------------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        return self._outstanding

    async def submit(self, task: TaskArg, source: str, sample_id: str | None = None,
                     **fields: Unpack[SubmitFields]) -> str:
        """Queue a candidate; its result arrives on results() (and on_result). Returns its id.
        The fields: evalfarm.client.submission.SubmitFields."""
        sub = Submission.of(task, source, sample_id, fields)
        sample_id = self._register(sub.sample_id, stream=True)
        self._enqueue(sub, sample_id)
        return sample_id

    async def score(self, task: TaskArg, source: str, sample_id: str | None = None,
                    **fields: Unpack[SubmitFields]) -> SampleResult:
        """Score one candidate and wait for its result (bounded by the deadline)."""
        sub = Submission.of(task, source, sample_id, fields)
        sample_id = self._register(sub.sample_id, stream=False)
        self._enqueue(sub, sample_id)
        return await self._futures[sample_id]

    async def score_nowait(self, task: TaskArg, source: str, sample_id: str | None = None, *,
                           done: Callable[[SampleResult], None], **fields: Unpack[SubmitFields]) -> str:
        """Queue a candidate; `done(result)` is called once, on the client's loop."""
        sub = Submission.of(task, source, sample_id, fields)
        sample_id = self._register(sub.sample_id, stream=False)
        self._futures[sample_id].add_done_callback(lambda f: done(f.result()))
        self._enqueue(sub, sample_id)
        return sample_id

    async def results(self, timeout: float | None = None) -> AsyncIterator[SampleResult]:
        """Results of submit()ted samples as they finish, until none is outstanding."""
        while self._outstanding > 0 or not self._out.empty():
            if timeout is None:
                item = await self._out.get()
            else:
                item = await asyncio.wait_for(self._out.get(), timeout)
            yield item

    def _register(self, sample_id: str | None, stream: bool) -> str:
        if not self._started or self._closed:
            raise RuntimeError("client is not started (use `async with` or await start())")
        if sample_id is None:
            sample_id = f"s{next(self._ids)}"
        if sample_id in self._futures:
            raise ValueError(f"sample id {sample_id!r} was already submitted")
        self._futures[sample_id] = asyncio.get_running_loop().create_future()
        if stream:
            self._streamed.add(sample_id)
            self._outstanding += 1
        return sample_id

    def _enqueue(self, sub: Submission, sample_id: str) -> None:
        tags, source, deadline_s = dict(sub.tags or {}), sub.source, sub.deadline_s
        try:
            task_ref = _task_ref(sub.task)
            opts = options_to_pb(sub.options)
            reverify_above = reverify.REVERIFY_ABOVE
            if self.reverify:
                # One owner for re-verification: this client re-measures outliers on another
                # daemon, so the daemon must not also re-measure them in place.
                if opts.HasField("reverify_above"):
                    reverify_above = opts.reverify_above
                opts.reverify_above = 0.0
        except (ValueError, TypeError) as err:
            self._deliver_one(sample_id, tags, SampleResult(
                sample_id, ScoreResult.failure(Verdict.INFRA_ERROR, f"invalid request: {err}"),
                error_code="INVALID_ARGUMENT"))
            return
        src = source.encode("utf-8")
        key = hashlib.sha256(
            b"\0".join((task_ref.SerializeToString(deterministic=True), src,
                        opts.SerializeToString(deterministic=True)))
        ).hexdigest()
        self.stats["submitted"] += 1
        done = self._completed.get(key)
        if done is not None:
            self.stats["client_cache_hits"] += 1
            self._deliver_one(sample_id, tags, dataclasses.replace(done, cached=True, deduped=True))
            return
        job = self._inflight_jobs.get(key)
        if job is not None:
            self.stats["deduped"] += 1
            job.samples.append((sample_id, tags))
            return
        request = pb.ScoreRequest(
            task=task_ref, candidate=pb.Candidate(source=src, sample_id=sample_id, tags=tags), options=opts
        )
        task_key = task_ref.name or hashlib.sha256(task_ref.source.source).hexdigest()
        job = _Job(key=key, task=task_ref, task_key=task_key, request=request, samples=[(sample_id, tags)],
                   deadline_s=deadline_s if deadline_s is not None else self.default_deadline_s,
                   reverify_above=reverify_above)
        self._inflight_jobs[key] = job
        self._push(job)

    # -- dispatch ------------------------------------------------------------------------
    def call_limit_s(self, deadline_s: float) -> float:
        """How long one dispatched call may take: its deadline, the daemon's queue, the grace a
        daemon gives an evaluation past its deadline to report its TIMEOUT, the wire."""
        ahead = max((ep.build_workers for ep in self._endpoints), default=0)
        queue_wait = (self.queue_wait_s if self.queue_wait_s is not None
                      else (1 + self.queue_allowance + ahead) * deadline_s)
        return deadline_s + queue_wait + DEADLINE_GRACE_S + self.rpc_overhead_s

    def result_limit_s(self, deadline_s: float) -> float:
        """A bound on one sample's result once it is dispatched: every attempt of the first
        measurement and of a re-verification (time waiting in this client's queue aside)."""
        return 2 * self.max_attempts * self.call_limit_s(deadline_s)

    def _push(self, job: _Job) -> None:
        """Queue a job here (re-verifications first); its deadline does not run while it waits."""
        if job.timer is not None:
            job.timer.cancel()
            job.timer = None
        job.deadline = None
        job.unavailable_since = None if self._targets_for(job) else asyncio.get_running_loop().time()
        heapq.heappush(self._waiting, (0 if job.parent is not None else 1, next(self._seq), job))
        self._credit.set()

    def _targets_for(self, job: _Job) -> list[_Endpoint]:
        """The daemons the job may go to now (credit aside)."""
        now = time.monotonic()
        if job.parent is None or job.first is None:
            usable = [ep for ep in self._endpoints if ep.usable(now) and ep.slots > 0]
            model = self.model_for(job.task_key)
            if model is not None:
                return [ep for ep in usable if ep.gpu_model == model]
            if self.route_by_model:  # a daemon mixing models cannot give one model per reward
                return [ep for ep in usable if ep.gpu_model]
            return usable
        # A re-verification: another daemon with the same device model when one is up,
        # else the daemon that measured the first score.
        first = job.first
        others = [ep for ep in self._endpoints if ep.target != first.endpoint and ep.up and not ep.draining
                  and ep.same_model(first.gpu_name)]
        if others:
            return [ep for ep in others if ep.usable(now)]
        return [ep for ep in self._endpoints if ep.target == first.endpoint and ep.usable(now)]

    def model_for(self, task_key: str) -> str | None:
        """The device model a task's samples must be scored on (None: any)."""
        if self.gpu_model is not None:
            return self.gpu_model
        return self._task_model.get(task_key) if self.route_by_model else None

    def _pick(self, job: _Job) -> _Endpoint | None:
        best: tuple[Any, ...] | None = None
        chosen = None
        for ep in self._targets_for(job):
            credits = ep.credits(self.queue_allowance)
            if credits <= 0 and job.parent is None:
                continue  # a re-verification goes now: the daemon runs it ahead of its queue
            rank = (ep.target not in job.tried, credits / max(1, ep.slots), credits)
            if best is None or rank > best:
                best, chosen = rank, ep
        return chosen

    async def _dispatch_loop(self) -> None:
        while True:
            self._dispatch_ready()
            self._credit.clear()
            try:
                await asyncio.wait_for(self._credit.wait(), 0.25)
            except TimeoutError:
                pass

    def _dispatch_ready(self) -> None:
        """Send what can go now: re-verifications first, then ordinary jobs in order."""
        held: list[tuple[int, int, _Job]] = []
        while self._waiting:
            item = heapq.heappop(self._waiting)
            job = item[2]
            if job.finished:
                continue
            ep = self._pick(job)
            if ep is None:
                held.append(item)
                if job.parent is None:
                    break  # no credit anywhere: the ordinary jobs behind it wait too
                continue
            self._send(job, ep)
        for item in held:
            heapq.heappush(self._waiting, item)

    def _send(self, job: _Job, ep: _Endpoint) -> None:
        loop = asyncio.get_running_loop()
        ep.inflight += 1
        if job.first is not None and ep.target == job.first.endpoint:
            job.same_daemon = True
        job.attempts += 1
        job.tried.add(ep.target)
        job.endpoint = ep.target
        if self.route_by_model and ep.gpu_model and job.task_key not in self._task_model:
            self._task_model[job.task_key] = ep.gpu_model  # the first model seen for this task
            log.info("event=task_routed task=%s gpu_model=%s", job.task_key, ep.gpu_model)
        # The deadline starts now, with the dispatch; the daemon's queue gets its own allowance.
        job.deadline = loop.time() + self.call_limit_s(job.deadline_s)
        job.timer = loop.call_at(job.deadline, self._expire, job)
        job.rpc = asyncio.ensure_future(self._run(job, ep))
        self._rpcs.add(job.rpc)
        job.rpc.add_done_callback(self._rpcs.discard)

    def _check_unavailable(self) -> None:
        """A job that waits here while no daemon it could go to is up fails after its deadline_s."""
        now = asyncio.get_running_loop().time()
        for _, _, job in list(self._waiting):
            if job.finished or job.deadline is not None:
                continue
            if self._targets_for(job):
                job.unavailable_since = None
            elif job.unavailable_since is None:
                job.unavailable_since = now
            elif now - job.unavailable_since >= job.deadline_s:
                self.stats["deadline_exceeded"] += 1
                self._deliver(job, self._infra_result(
                    job, f"deadline exceeded: no daemon available for {job.deadline_s:g}s", InfraCause.DEADLINE))

    def _requeue(self, job: _Job, why: str) -> None:
        job.last_error = why
        if job.attempts >= self.max_attempts:
            self._deliver(job, self._infra_result(job, f"gave up after {job.attempts} attempts: {why}"))
            return
        self.stats["retries"] += 1
        self._push(job)

    async def _run(self, job: _Job, ep: _Endpoint) -> None:
        loop = asyncio.get_running_loop()
        try:
            assert job.deadline is not None
            remaining = job.deadline - loop.time()
            if remaining <= 0:
                return  # the timer delivers
            req = pb.ScoreRequest()
            req.CopyFrom(job.request)
            req.deadline_s = job.deadline_s  # counted by the daemon from when a slot starts it
            try:
                reply = await ep.stub.Score(req, timeout=remaining, metadata=self._metadata)
            except grpc.aio.AioRpcError as err:
                self._on_rpc_error(job, ep, err)
                return
            if job.finished:
                return
            if job.timer is not None:
                job.timer.cancel()
                job.timer = None
            res = SampleResult(
                sample_id="", result=result_from_pb(reply), host=reply.host,
                gpu_name=reply.gpu_name or ep.gpu_model, gpu_uuid=reply.gpu_uuid, slot=reply.slot,
                endpoint=ep.target, cached=reply.evidence.cached, attempts=job.attempts,
            )
            if res.result.verdict is Verdict.INFRA_ERROR:
                self.stats["infra_errors"] += 1
                log.info("event=infra_error endpoint=%s detail=%r", ep.target, res.result.detail)
                # The cause decides (evalfarm.infra_cause): a deadline that passed on the daemon, or
                # a task too large for the device, would come back the same; other faults are retried.
                cause = res.result.cause
                if job.attempts < self.max_attempts and cause is not None and cause.retried:
                    self._requeue(job, res.result.detail)
                    return
            self._completed_job(job, res)
        finally:
            ep.inflight -= 1
            self._credit.set()

    def _on_rpc_error(self, job: _Job, ep: _Endpoint, err: grpc.aio.AioRpcError) -> None:
        code = err.code()
        if job.finished:
            return
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            self.stats["resource_exhausted"] += 1
            ep.backoff_until = time.monotonic() + 0.2
            job.attempts -= 1  # not the candidate's fault, nor the host's: try again
            job.tried.discard(ep.target)
            self._push(job)
        elif code in RETRYABLE:
            self.stats["connection_errors"] += 1
            log.warning("event=rpc_failed endpoint=%s code=%s details=%r", ep.target, code.name, err.details())
            ep.up = False  # until a Capacity poll succeeds again
            self._requeue(job, f"{ep.target}: {code.name}: {err.details()}")
        elif code is grpc.StatusCode.DEADLINE_EXCEEDED:
            self._deliver(job, self._infra_result(job, "deadline exceeded", InfraCause.DEADLINE))
        else:  # INVALID_ARGUMENT, UNAUTHENTICATED, ...: the request itself is wrong
            self._deliver(
                job,
                SampleResult("", ScoreResult.failure(Verdict.INFRA_ERROR, f"{code.name}: {err.details()}"),
                             endpoint=ep.target, attempts=job.attempts, error_code=code.name),
            )

    def _expire(self, job: _Job) -> None:
        if not job.finished:
            self.stats["deadline_exceeded"] += 1
            self._deliver(job, self._infra_result(job, "deadline exceeded", InfraCause.DEADLINE))

    # -- re-verification -----------------------------------------------------------------
    def _completed_job(self, job: _Job, res: SampleResult) -> None:
        if (job.parent is None and self.reverify
                and reverify.needs_reverification(res.result, above=job.reverify_above,
                                                  best=self._best.get(job.task_key))):
            self._start_reverify(job, res)
            return
        self._deliver(job, res)

    def _start_reverify(self, job: _Job, first: SampleResult) -> None:
        self.stats["reverifications"] += 1
        request = pb.ScoreRequest()
        request.CopyFrom(job.request)
        request.no_cache = True  # a fresh measurement, never the cached first one
        request.reverification = True  # the daemon runs it ahead of its queued work
        child = _Job(key=job.key + ":reverify", task=job.task, task_key=job.task_key, request=request,
                     samples=[], deadline_s=job.deadline_s, parent=job, first=first)
        job.rpc = None
        self._children[job.key] = child
        self._push(child)
        log.info("event=reverify task=%s speedup=%s first=%s gpu=%s", job.task_key, first.result.speedup,
                 first.endpoint, first.gpu_name)

    def _merge_reverified(self, job: _Job, second: SampleResult) -> SampleResult:
        first = job.first
        assert first is not None
        if job.same_daemon:
            where = "same daemon: no other daemon with this device model"
        else:
            where = "another daemon with the same device model"
        info = {"host": second.host, "endpoint": second.endpoint, "first_host": first.host,
                "first_endpoint": first.endpoint, "same_daemon": job.same_daemon}
        merged = reverify.merge(first.result, second.result, where=where, info=info,
                                first_label=first.host or first.endpoint,
                                second_label=second.host or second.endpoint)
        rv = merged.evidence.reverified
        from_second = rv["status"] == reverify.FAILED or (
            rv["status"] == reverify.DISAGREED and rv["speedup"] < rv["first_speedup"])
        base = second if from_second else first
        return dataclasses.replace(base, result=merged, cached=False)

    # -- delivery ------------------------------------------------------------------------
    def _infra_result(self, job: _Job, detail: str, cause: InfraCause = InfraCause.OTHER) -> SampleResult:
        return SampleResult("", ScoreResult.failure(Verdict.INFRA_ERROR, detail, task=job.task_key,
                                                    infra_cause=cause), attempts=job.attempts)

    def _deliver(self, job: _Job, res: SampleResult) -> None:
        """The one final result for every sample id of the job."""
        if job.finished:
            return
        job.finished = True
        if job.timer is not None:
            job.timer.cancel()
        if job.rpc is not None and not job.rpc.done() and job.rpc is not asyncio.current_task():
            job.rpc.cancel()
        child = self._children.pop(job.key, None)
        if child is not None and not child.finished:
            child.finished = True
            if child.rpc is not None and not child.rpc.done() and child.rpc is not asyncio.current_task():
                child.rpc.cancel()
        if job.parent is not None:  # a re-verification: its parent gets the merged result
            self._deliver(job.parent, self._merge_reverified(job, res))
            return
        self._inflight_jobs.pop(job.key, None)
        r = res.result
        if r.verdict is Verdict.OK and r.speedup is not None:
            self._best[job.task_key] = max(self._best.get(job.task_key, 0.0), r.speedup)
        if r.verdict is not Verdict.INFRA_ERROR:
            self._completed[job.key] = res
            while len(self._completed) > 100_000:
                self._completed.popitem(last=False)
        many = len(job.samples) > 1
        for sample_id, tags in job.samples:
            self._deliver_one(sample_id, tags, dataclasses.replace(res, deduped=res.deduped or many))

    def _deliver_one(self, sample_id: str, tags: dict[str, str], res: SampleResult) -> None:
        fut = self._futures.get(sample_id)
        if fut is None or fut.done():
            self.stats["duplicates_dropped"] += 1
            return
        res = dataclasses.replace(res, sample_id=sample_id, tags=tags)
        fut.set_result(res)
        self.stats["delivered"] += 1
        if sample_id in self._streamed:
            self._streamed.discard(sample_id)
            self._outstanding -= 1
            self._out.put_nowait(res)
        if self._on_result is not None:
            try:
                self._on_result(res)
            except Exception:  # noqa: BLE001 - a user callback must not break delivery
                log.exception("event=on_result_failed sample_id=%s", sample_id)


def read_source(path: str | Path) -> str:
    return Path(path).read_text(encoding="utf-8")
