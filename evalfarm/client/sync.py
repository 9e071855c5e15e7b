"""FarmClient: the synchronous face of AsyncFarmClient (an event loop in a background thread)."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any, TypeVar, Unpack

from evalfarm.client.channel import TlsConfig
from evalfarm.client.core import AsyncFarmClient, SampleResult
from evalfarm.client.submission import SubmitFields, TaskArg
from evalfarm.config import ScoreConfig
from evalfarm.v1 import evalfarm_pb2 as pb

T = TypeVar("T")


class FarmClient:
    """Thread-safe. Every wait is bounded: pass timeouts, or rely on per-sample deadlines."""

    def __init__(
        self,
        endpoints: Iterable[str],
        token: str | None = None,
        tls: TlsConfig | bool | None = None,
        *,
        on_result: Callable[[SampleResult], None] | None = None,
        start_timeout_s: float = 30.0,
        **kwargs: Any,
    ) -> None:
        self._results: queue.Queue[SampleResult] = queue.Queue()
        self._on_result = on_result
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="evalfarm-client", daemon=True)
        self._thread.start()
        self._pending = 0
        self._lock = threading.Lock()
        self._closed = False

        async def make() -> AsyncFarmClient:
            return await AsyncFarmClient(endpoints, token, tls, on_result=self._deliver, **kwargs).start()

        try:
            self._client = self._call(make(), start_timeout_s)
        except BaseException:
            self._stop_loop()
            raise

    def _deliver(self, res: SampleResult) -> None:  # runs on the client loop
        if self._on_result is not None:
            self._on_result(res)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def submit(self, task: TaskArg, source: str, sample_id: str | None = None,
               **fields: Unpack[SubmitFields]) -> str:
        """Queue a candidate; its result comes from results() (and on_result). The fields:
        evalfarm.client.submission.SubmitFields."""

        async def go() -> str:
            return await self._client.score_nowait(task, source, sample_id, done=self._results.put, **fields)

        sid = self._call(go(), 30.0)
        with self._lock:
            self._pending += 1
        return sid

    def results(self, timeout: float | None = None) -> Iterator[SampleResult]:
        """Yield results of submit()ted samples as they finish, until none is outstanding.

        `timeout` bounds each wait; queue.Empty... is raised as TimeoutError when it passes.
        """
        while True:
            with self._lock:
                if self._pending == 0:
                    return
            try:
                res = self._results.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"no result within {timeout}s") from None
            with self._lock:
                self._pending -= 1
            yield res

    def score(self, task: TaskArg, source: str, sample_id: str | None = None,
              **fields: Unpack[SubmitFields]) -> SampleResult:
        """Score one candidate and wait for its result.

        ``deadline_s`` bounds each dispatch from when it is sent (see AsyncFarmClient); this
        call waits at most ``result_limit_s(deadline_s) + 30`` (every attempt, re-verification
        included).
        """
        deadline = fields.get("deadline_s")
        fields["deadline_s"] = deadline = deadline if deadline is not None else self._client.default_deadline_s
        coro = self._client.score(task, source, sample_id, **fields)
        return self._call(coro, self._client.result_limit_s(deadline) + 30.0)

    def score_many(
        self,
        task_sources: Iterable[tuple[TaskArg, str]],
        *,
        options: dict[str, Any] | ScoreConfig | None = None,
        deadline_s: float | None = None,
        timeout: float | None = None,
    ) -> list[SampleResult]:
        """Score many; results in submission order."""
        ids = [self.submit(t, s, options=options, deadline_s=deadline_s) for t, s in task_sources]
        got = {r.sample_id: r for r in self.results(timeout=timeout)}
        return [got[i] for i in ids]

    def capacity(self, timeout: float = 10.0) -> dict[str, pb.CapacityResponse | None]:
        return self._call(self._client.capacity(), timeout)

    @property
    def stats(self) -> dict[str, int]:
        return dict(self._client.stats)

    def close(self, timeout: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._client.close(), timeout)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> FarmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
