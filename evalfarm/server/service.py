"""The EvalFarm servicer: validation, result cache, admission, evaluation, drain.

Deadlines (the rule: evalfarm.eval_budget): a request's `deadline_s` counts from when a slot
starts its evaluation, so time spent in the daemon's queue never burns it; it is the
evaluation's own deadline (the daemon's `max_eval_s` when it gives none or a longer one), and
an evaluation that runs past it ends as TIMEOUT, as a local score would. Only an evaluation that
has not reported `deadline_grace_s` after its deadline is INFRA_ERROR ("deadline exceeded"). The
gRPC deadline of the call (or stream), if any, bounds queue wait and evaluation together. Re-verification requests
(`ScoreRequest.reverification`) take the next free slot, ahead of queued ordinary work.
Slots that keep faulting are taken out of service and probed back in (evalfarm.server.slot_health).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import grpc

from evalfarm.client.wire import DRAINING_DETAIL, error_sample, result_to_pb
from evalfarm.config import ScoreConfig
from evalfarm.eval_budget import evaluation_deadline_s, stuck_detail
from evalfarm.infra_cause import InfraCause
from evalfarm.result import ScoreResult
from evalfarm.scoring import build_ahead
from evalfarm.server.cache import ResultCache, cache_key
from evalfarm.server.config import ServerConfig
from evalfarm.server.lenient import MalformedRequest
from evalfarm.server.metrics import FarmSample, Metrics, SlotLabels, SlotSample
from evalfarm.server.redact import HostPaths
from evalfarm.server.slot_health import (
    PROBE_CONFIG,
    FaultInjector,
    SlotHealth,
    SlotState,
    probe_candidate,
)
from evalfarm.server.slots import Draining, NoSlots, QueueFull, SlotPool
from evalfarm.server.validate import InvalidRequest, Prepared, TaskMismatch, TaskResolver, prepare
from evalfarm.tasks import Candidate, Task
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc
from evalfarm.verdict import Verdict

log = logging.getLogger(__name__)

INLINE_PARSE_BYTES = 64 << 10  # larger sources are parsed off the event loop
CANCEL_GRACE_S = 30.0  # how long a cancelled evaluation may take to die before its slot is reused


class Evaluation(Protocol):
    def result(self, timeout: float | None = None) -> ScoreResult: ...
    def cancel(self) -> None: ...
    @property
    def done(self) -> bool: ...


# (task, candidate, config, build pool, deadline_s): deadline_s bounds the evaluation from its start.
Backend = Callable[[Task, Candidate, ScoreConfig, Any, float], Evaluation]


def default_backend(judges: Any = None) -> Backend:
    """Evaluations by ``evalfarm.scoring``, with judges from ``judges`` (a WarmJudges) when given."""
    from evalfarm.scoring import start  # imported lazily: the daemon must not touch CUDA

    def run(task: Task, candidate: Candidate, config: ScoreConfig, build_pool: Any, deadline_s: float) -> Evaluation:
        return start(task, candidate, config, build_pool=build_pool, judges=judges, deadline_s=deadline_s)

    return run


class RequestRejected(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("cuda-crl")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return "0.1.0"


class FarmService(pb_grpc.EvalFarmServicer):
    def __init__(
        self,
        config: ServerConfig,
        backend: Backend,
        metrics: Metrics,
        cache: ResultCache,
        build_pool: Any = None,
        sandbox: Any = None,
    ) -> None:
        self.config = config
        # What the start-up check found (an evalfarm.sandbox.isolation.Isolation; None for a backend that
        # runs no candidate code): said in Capacity and in every result's evidence.
        self.sandbox_note = "" if sandbox is None else sandbox.summary() + (
            "" if sandbox.strong else " (served with --allow-weak-sandbox)")
        self._redact = HostPaths(config.cache_dir)
        self.metrics = metrics
        self.cache = cache
        self.slots = SlotPool(config.slots, config.queue_limit)
        self._backend = backend
        self._build_pool = build_pool
        self._resolver = TaskResolver(config.kernelbench_root)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2 * config.slots + 4, thread_name_prefix="evalfarm-eval"
        )
        self._abort = asyncio.Event()  # set when the drain timeout passes
        self._active = 0  # admitted requests (queued or running)
        self._idle = asyncio.Event()
        self._idle.set()
        self._background: set[asyncio.Task[Any]] = set()
        self.version = _version()
        self._kinds = [self._device_kind(i) for i in range(config.slots)]
        self.slot_states = [
            SlotState(i, config.devices[i], self._gpu_name(i), self.gpu_uuid(i)) for i in range(config.slots)
        ]
        self.on_slot_change: Callable[[SlotState], None] = lambda _s: None  # the daemon's health service
        self.health = SlotHealth(
            self.slot_states, config.health_policy,
            take_out=self.slots.take_out, wait_idle=self.slots.wait_idle_out, put_back=self.slots.put_back,
            run_probe=self._run_probe, on_change=lambda st: self.on_slot_change(st),
            on_probe=lambda st, ok: self.metrics.probes.labels(*self.metrics.labels_for(st.index),
                                                               "pass" if ok else "fail").inc(),
        )
        self._faults = FaultInjector.from_env()  # test hook: off unless the environment enables it
        self._probe: tuple[Task, Candidate] | None = None
        metrics.watch_slots(self.sample)

    @staticmethod
    def slot_labels(config: ServerConfig) -> list[SlotLabels]:
        """Metric labels of every slot (gpu_uuid 'cpu' for CPU slots)."""
        out = []
        for i, device in enumerate(config.devices):
            if device == "cpu":
                out.append(SlotLabels(str(i), "cpu", "cpu"))
            else:
                uuid = config.gpu_uuids[i] if i < len(config.gpu_uuids) else ""
                out.append(SlotLabels(str(i), uuid or f"unknown-{i}", config.gpu_names[i]))
        return out

    def gpu_uuid(self, slot: int | None) -> str:
        if slot is None or self.config.device_mode == "cpu" or slot >= len(self.config.gpu_uuids):
            return ""
        return self.config.gpu_uuids[slot]

    @property
    def gpu_model(self) -> str:
        """The one device model of this daemon: a GPU name, 'cpu', or '' when GPU models mix."""
        if self.config.device_mode == "cpu":
            return "cpu"
        names = set(self.config.gpu_names)
        return names.pop() if len(names) == 1 else ""

    def sample(self) -> FarmSample:
        labels = self.metrics.slot_labels
        return FarmSample(
            slots=[SlotSample(labels[st.index], self.slots.busy(st.index), st.in_service, st.consecutive_faults)
                   for st in self.slot_states],
            ordinary_depth=self.slots.ordinary_depth,
            priority_depth=self.slots.priority_depth,
            queue_limit=self.slots.queue_limit,
        )

    # -- helpers -------------------------------------------------------------------------
    def _device_kind(self, slot: int) -> str:
        if self.config.device_mode == "cpu":
            from evalfarm.server.gpus import cpu_name

            return f"cpu:{cpu_name()}"
        return f"cuda:{self.config.gpu_names[slot]}"

    def _gpu_name(self, slot: int | None) -> str:
        if self.config.device_mode == "cpu":
            return "cpu"
        if slot is None:
            return self.config.gpu_names[0] if len(set(self.config.gpu_names)) == 1 else ""
        return self.config.gpu_names[slot]

    @property
    def draining(self) -> bool:
        return self.slots.draining

    def start_drain(self) -> None:
        self.slots.draining = True
        self.metrics.draining.set(1)
        self.health.stop()

    def abort_in_flight(self) -> None:
        """After the drain timeout: cancel what is left; each gets INFRA_ERROR 'daemon draining'."""
        self._abort.set()

    async def wait_idle(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def wait_background(self, timeout: float) -> None:
        if self._background:
            await asyncio.wait(set(self._background), timeout=timeout)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _prepare(self, req: pb.ScoreRequest, stream: bool) -> Prepared:
        size = len(req.candidate.source) + len(req.task.source.source)
        try:
            if size > INLINE_PARSE_BYTES:
                return await asyncio.to_thread(
                    prepare, req, self._resolver, self.config.max_source_bytes, stream
                )
            return prepare(req, self._resolver, self.config.max_source_bytes, stream)
        except TaskMismatch as err:
            raise self._invalid(grpc.StatusCode.FAILED_PRECONDITION, str(err), req.candidate.sample_id) from None
        except InvalidRequest as err:
            raise self._invalid(grpc.StatusCode.INVALID_ARGUMENT, str(err), req.candidate.sample_id) from None

    def _invalid(self, code: grpc.StatusCode, reason: str, sample_id: str = "") -> RequestRejected:
        """A request refused for what it holds: counted, and logged once here with its reason."""
        self.metrics.rejected.labels("invalid").inc()
        log.warning("event=invalid_request code=%s sample_id=%s reason=%r", code.name, sample_id, reason[:500])
        return RequestRejected(code, reason)

    async def _race(self, fut: asyncio.Future[Any], deadline: float | None) -> str:
        """Wait for fut, the deadline or the drain abort; says which came first."""
        loop = asyncio.get_running_loop()
        abort = asyncio.ensure_future(self._abort.wait())
        try:
            timeout = None if deadline is None else max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait({fut, abort}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            abort.cancel()
        if fut in done:
            return "done"
        return "drain" if abort in done else "deadline"

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _cancel_then_release(self, ev_future: asyncio.Future[Any], slot: int, t_slot: float) -> None:
        """Kill a cancelled evaluation's processes, then hand its slot on (never before)."""
        loop = asyncio.get_running_loop()
        try:
            ev = await asyncio.wait_for(asyncio.shield(ev_future), CANCEL_GRACE_S)
            await asyncio.wait_for(loop.run_in_executor(self._executor, ev.cancel), CANCEL_GRACE_S)
        except Exception as err:  # noqa: BLE001 - start failed or cancel hung: nothing more to kill
            log.warning("event=cancel_cleanup slot=%d error=%r", slot, err)
        finally:
            self._release(slot, t_slot)

    def _release(self, slot: int, t_slot: float) -> None:
        self.metrics.slot_busy_seconds.labels(*self.metrics.labels_for(slot)).inc(time.monotonic() - t_slot)
        self.slots.release(slot)

    # -- the core ------------------------------------------------------------------------
    async def _score(self, prep: Prepared, deadline: float | None) -> pb.ScoredSample:
        """Cache, admission, evaluation. Raises RequestRejected when not admitted.

        ``deadline`` (loop time, from the gRPC deadline) bounds queue wait and evaluation;
        ``prep.deadline_s`` bounds the evaluation from when its slot starts it.
        """
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        uniform = len(set(self._kinds)) == 1
        if uniform and not prep.no_cache:
            key = cache_key(prep.task.sha256, prep.candidate.sha256, prep.config, self._kinds[0])
            hit = self.cache.get(key)
            self.metrics.result_cache.labels("hit" if hit else "miss").inc()
            if hit is not None:
                return self._finish(prep, hit, None, t0, 0.0, cached=True)
        self._refuse_if_draining()  # again: it may have begun while the request was prepared
        self._active += 1
        self._idle.clear()
        try:
            return await self._admitted(prep, deadline, t0, loop)
        finally:
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    async def _admitted(
        self, prep: Prepared, deadline: float | None, t0: float, loop: asyncio.AbstractEventLoop
    ) -> pb.ScoredSample:
        self._build_ahead(prep)
        acquire = asyncio.ensure_future(self.slots.acquire(priority=prep.reverification))
        try:
            outcome = await self._race(acquire, deadline)
        except asyncio.CancelledError:
            self._drop_acquire(acquire)
            raise
        if outcome != "done":
            self._drop_acquire(acquire)
            infra = (self._infra(prep, "daemon draining", InfraCause.DRAINING) if outcome == "drain"
                     else self._infra(prep, "deadline exceeded (in queue)", InfraCause.DEADLINE))
            return self._finish(prep, infra, None, t0, time.monotonic() - t0)
        try:
            slot = acquire.result()
        except QueueFull as err:
            self.metrics.rejected.labels("queue_full").inc()
            raise RequestRejected(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err)) from None
        except Draining:
            self._refuse_if_draining(True)
        except NoSlots as err:
            self.metrics.rejected.labels("no_slots").inc()
            raise RequestRejected(grpc.StatusCode.UNAVAILABLE, f"{err}: try another host") from None

        queue_s = time.monotonic() - t0
        t_slot = time.monotonic()
        # The evaluation's own deadline starts now, with its slot; past it (and the grace for
        # reporting its TIMEOUT) it is stuck: the daemon's fault (evalfarm.eval_budget).
        own_s = evaluation_deadline_s(prep.deadline_s, self.config.max_eval_s)
        stuck_at = loop.time() + own_s + self.config.deadline_grace_s
        limit = stuck_at if deadline is None else min(deadline, stuck_at)
        config = prep.config.replace(device=self.config.devices[slot])
        start = loop.run_in_executor(self._executor, self._start_on_slot, slot, prep.task, prep.candidate, config,
                                     own_s)
        handed_off = False
        try:
            outcome = await self._race(start, limit)
            if outcome == "done" and start.exception() is not None:
                err = start.exception()
                log.error("event=start_failed sample_id=%s error=%r", prep.sample_id, err)
                result = self._infra(prep, f"scoring could not start: {err!r}")
            elif outcome == "done":
                result, handed_off = await self._wait_result(
                    prep, start.result(), limit, stuck_detail(own_s, self.config.deadline_grace_s)
                    if limit == stuck_at else "deadline exceeded", loop, slot, t_slot
                )
            else:
                handed_off = True
                self._spawn(self._cancel_then_release(start, slot, t_slot))
                result = (self._infra(prep, "daemon draining", InfraCause.DRAINING) if outcome == "drain"
                          else self._infra(prep, "deadline exceeded", InfraCause.DEADLINE))
        except asyncio.CancelledError:
            # Client went away or its deadline passed: kill the processes, then free the slot.
            if not handed_off:
                handed_off = True
                self._spawn(self._cancel_then_release(start, slot, t_slot))
            raise
        finally:
            if not handed_off:
                self._release(slot, t_slot)

        result = await self._check_slot(slot, result)
        key = cache_key(prep.task.sha256, prep.candidate.sha256, prep.config, self._kinds[slot])
        self.cache.put(key, result)  # never stores INFRA_ERROR
        return self._finish(prep, result, slot, t0, queue_s)

    def _build_ahead(self, prep: Prepared) -> None:
        """Start the candidate's build while it waits for a slot (evalfarm.scoring.build_ahead), in
        a thread: the static check it runs first takes up to ~0.2 s on the largest sources."""
        if self._build_pool is None or len(set(self._kinds)) != 1:
            return
        config = prep.config.replace(device=self.config.devices[0])

        async def run() -> None:
            try:
                await asyncio.to_thread(build_ahead, prep.task, prep.candidate, config, self._build_pool)
            except Exception as err:  # noqa: BLE001 - the evaluation builds (and reports) on its own
                log.warning("event=build_ahead_failed sample_id=%s error=%r", prep.sample_id, err)

        self._spawn(run())

    def _start_on_slot(self, slot: int, task: Task, candidate: Candidate, config: ScoreConfig,
                       deadline_s: float) -> Evaluation:
        if self._faults is not None and self._faults.faulty(slot):
            return _Finished(FaultInjector.result(task, candidate, slot))
        return self._backend(task, candidate, config, self._build_pool, deadline_s)

    async def _check_slot(self, slot: int, result: ScoreResult) -> ScoreResult:
        """Count the slot's faults; the one that takes it out waits for the first probe."""
        if not self.health.observe(slot, result):
            return result
        if await self.health.suspect(slot):
            return result  # the probe passed: the candidate's own fault
        state = self.slot_states[slot]
        return ScoreResult.failure(
            Verdict.INFRA_ERROR,
            f"slot {slot} ({state.gpu_uuid or state.device}) taken out of service: {state.reason}; "
            f"this result ({result.verdict.value}: {result.detail[:200]}) is not trusted, retry elsewhere",
            task=result.task, candidate_sha256=result.candidate_sha256,
        )

    async def _run_probe(self, slot: int) -> ScoreResult:
        """Score the known-good probe on `slot` (out of service, idle)."""
        loop = asyncio.get_running_loop()
        if self._probe is None:
            self._probe = await asyncio.to_thread(probe_candidate)
        task, candidate = self._probe
        kind = "cpu" if self.config.device_mode == "cpu" else "cuda"
        await asyncio.to_thread(task.resolve_profile, PROBE_CONFIG.size_profile, kind)
        config = PROBE_CONFIG.replace(device=self.config.devices[slot])
        limit_s = self.config.health_policy.probe_timeout_s
        ev = await loop.run_in_executor(self._executor, self._start_on_slot, slot, task, candidate, config, limit_s)
        try:
            return await loop.run_in_executor(self._executor, ev.result, limit_s)
        except asyncio.CancelledError:
            await loop.run_in_executor(self._executor, ev.cancel)
            raise

    def _drop_acquire(self, acquire: asyncio.Future[int]) -> None:
        """Leave the queue; a slot granted meanwhile goes back to the pool."""
        if acquire.done():
            if not acquire.cancelled() and acquire.exception() is None:
                self.slots.release(acquire.result())
        else:
            acquire.cancel()  # SlotPool.acquire passes on a slot granted as it is cancelled

    async def _wait_result(
        self,
        prep: Prepared,
        ev: Evaluation,
        limit: float,
        late_detail: str,
        loop: asyncio.AbstractEventLoop,
        slot: int,
        t_slot: float,
    ) -> tuple[ScoreResult, bool]:
        """(result, handed_off): handed_off when it was cancelled and cleanup now owns the slot.
        ``limit`` (loop time) is when the daemon stops waiting; ``late_detail`` says why then."""
        waiter = loop.run_in_executor(self._executor, ev.result, max(0.0, limit - loop.time()) + 5.0)
        ev_future: asyncio.Future[Any] = loop.create_future()
        ev_future.set_result(ev)
        outcome = await self._race(waiter, limit)  # on CancelledError the caller cleans up
        if outcome == "done":
            try:
                return waiter.result(), False
            except TimeoutError:
                self._spawn(self._cancel_then_release(ev_future, slot, t_slot))
                return self._infra(prep, late_detail, InfraCause.DEADLINE), True
            except Exception as err:  # noqa: BLE001 - the scorer itself failed
                log.exception("event=scoring_failed sample_id=%s", prep.sample_id)
                return self._infra(prep, f"scoring failed: {err!r}"), False
        self._spawn(self._cancel_then_release(ev_future, slot, t_slot))
        if outcome == "drain":
            return self._infra(prep, "daemon draining", InfraCause.DRAINING), True
        return self._infra(prep, late_detail, InfraCause.DEADLINE), True

    def _refuse_if_draining(self, draining: bool = False) -> None:
        """The one draining rejection: RequestRejected(UNAVAILABLE, DRAINING_DETAIL), counted, when
        the daemon drains (or ``draining``: the slot pool said so)."""
        if draining or self.draining:
            self.metrics.rejected.labels("draining").inc()
            raise RequestRejected(grpc.StatusCode.UNAVAILABLE, DRAINING_DETAIL) from None

    def _infra(self, prep: Prepared, detail: str, cause: InfraCause = InfraCause.OTHER) -> ScoreResult:
        return ScoreResult.failure(
            Verdict.INFRA_ERROR, detail, task=prep.task.name, candidate_sha256=prep.candidate.sha256,
            infra_cause=cause,
        )

    def _finish(
        self, prep: Prepared, result: ScoreResult, slot: int | None, t0: float, queue_s: float, cached: bool = False
    ) -> pb.ScoredSample:
        total_s = time.monotonic() - t0
        labels = self.metrics.labels_for(slot, cached)
        self.metrics.verdicts.labels(result.verdict.value, *labels).inc()
        if not cached:
            self.metrics.phase_seconds.labels("queue", *labels).observe(queue_s)
            for phase, seconds in (result.evidence.phases_s or {}).items():
                self.metrics.phase_seconds.labels(str(phase), *labels).observe(float(seconds))
        log.info(
            "event=scored sample_id=%s task=%s verdict=%s speedup=%s slot=%s cached=%s reverification=%s "
            "queue_s=%.3f total_s=%.3f detail=%r",
            prep.sample_id, prep.task.name, result.verdict.value, result.speedup, slot, cached,
            prep.reverification, queue_s, total_s, result.detail[:200],
        )
        if self.sandbox_note:
            result = dataclasses.replace(result, evidence=dataclasses.replace(result.evidence,
                                                                              sandbox=self.sandbox_note))
        return self._redact.sample(result_to_pb(
            result,
            sample_id=prep.sample_id,
            host=self.config.host_label,
            gpu_name=self._gpu_name(slot),
            tags=prep.tags,
            queue_s=queue_s,
            total_s=total_s,
            cached=cached,
            gpu_uuid=self.gpu_uuid(slot),
            slot=slot,
        ))

    def _deadline(self, context: grpc.aio.ServicerContext) -> float | None:
        """The gRPC deadline (loop time), if any. A request's deadline_s starts with its slot."""
        remaining = context.time_remaining()
        return None if remaining is None else asyncio.get_running_loop().time() + remaining

    # -- RPCs ----------------------------------------------------------------------------
    async def Score(self, request: pb.ScoreRequest, context: grpc.aio.ServicerContext) -> pb.ScoredSample:
        self.metrics.requests.labels("Score").inc()
        try:
            self._refuse_if_draining()
            if isinstance(request, MalformedRequest):
                raise self._invalid(grpc.StatusCode.INVALID_ARGUMENT, request.message)
            prep = await self._prepare(request, stream=False)
            return await self._score(prep, self._deadline(context))
        except RequestRejected as err:
            await context.abort(err.code, err.message)
            raise AssertionError("unreachable") from None

    async def ScoreStream(
        self, request_iterator: AsyncIterator[pb.ScoreRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ScoredSample]:
        out: asyncio.Queue[Any] = asyncio.Queue()
        end = object()
        items: set[asyncio.Task[Any]] = set()
        pending = 0

        async def item(req: pb.ScoreRequest) -> None:
            nonlocal pending
            sample_id = req.candidate.sample_id
            tags = dict(req.candidate.tags)
            try:
                self._refuse_if_draining()
                prep = await self._prepare(req, stream=True)
                sample = await self._score(prep, self._deadline(context))
            except RequestRejected as err:
                sample = error_sample(sample_id, err.code, err.message, self.config.host_label, tags)
            except asyncio.CancelledError:
                pending -= 1
                raise
            except Exception as err:  # noqa: BLE001 - one bad item must not end the stream
                log.exception("event=stream_item_failed sample_id=%s", sample_id)
                sample = error_sample(
                    sample_id, grpc.StatusCode.INTERNAL, f"internal error: {err!r}", self.config.host_label, tags
                )
            pending -= 1
            out.put_nowait(sample)

        async def read() -> None:
            nonlocal pending
            try:
                async for req in request_iterator:
                    self.metrics.requests.labels("ScoreStream").inc()
                    if isinstance(req, MalformedRequest):  # answer what came before, then refuse
                        raise self._invalid(grpc.StatusCode.INVALID_ARGUMENT, req.message)
                    pending += 1
                    task = asyncio.ensure_future(item(req))
                    items.add(task)
                    task.add_done_callback(items.discard)
            finally:
                out.put_nowait(end)

        reader = asyncio.ensure_future(read())
        reader_done = False
        rejected: RequestRejected | None = None
        try:
            while not (reader_done and pending == 0 and out.empty()):
                got = await out.get()
                if got is end:
                    reader_done = True
                    if reader.done() and not reader.cancelled() and isinstance(reader.exception(), RequestRejected):
                        rejected = reader.exception()  # type: ignore[assignment]
                        continue
                    if reader.done() and not reader.cancelled() and reader.exception() is not None:
                        log.info("event=stream_reader_ended error=%r", reader.exception())
                        break
                    continue
                yield got
            if rejected is not None:
                await context.abort(rejected.code, rejected.message)
        finally:
            reader.cancel()
            for task in list(items):
                task.cancel()

    async def Capacity(self, request: pb.CapacityRequest, context: grpc.aio.ServicerContext) -> pb.CapacityResponse:
        if isinstance(request, MalformedRequest):
            err = self._invalid(grpc.StatusCode.INVALID_ARGUMENT, request.message)
            await context.abort(err.code, err.message)
        return pb.CapacityResponse(
            slots=self.slots.slots,
            free_slots=self.slots.free,
            running=self.slots.running,
            queue_depth=self.slots.queue_depth,
            queue_limit=self.slots.queue_limit,
            gpu_names=list(self.config.gpu_names),
            device_mode=self.config.device_mode,
            version=self.version,
            draining=self.draining,
            host=self.config.host_label,
            slot_status=[
                pb.SlotStatus(index=st.index, device=st.device, gpu_name=st.gpu_name if st.device != "cpu" else "",
                              gpu_uuid=st.gpu_uuid, busy=self.slots.busy(st.index), in_service=st.in_service,
                              reason=st.reason, consecutive_faults=st.consecutive_faults)
                for st in self.slot_states
            ],
            out_of_service=len(self.slots.out_of_service),
            gpu_model=self.gpu_model,
            build_workers=self.config.build_workers if self._build_pool is not None else 0,
            sandbox=self.sandbox_note,
        )


class _Finished:
    """An evaluation that is already over (an injected fault)."""

    def __init__(self, result: ScoreResult) -> None:
        self._result = result

    def result(self, timeout: float | None = None) -> ScoreResult:
        return self._result

    def cancel(self) -> None:
        pass

    @property
    def done(self) -> bool:
        return True
