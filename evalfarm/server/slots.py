"""Admission control: a fixed set of slots and a bounded FIFO queue in front of them.

`acquire()` decides at once: a free slot, a place in the queue, or an exception
(QueueFull -> RESOURCE_EXHAUSTED, Draining -> UNAVAILABLE). A waiter that is cancelled
(deadline, client gone, drain) leaves the queue; a slot granted to a cancelled waiter is
handed on, so slots are never leaked.
"""

from __future__ import annotations

import asyncio
import collections


class AdmissionError(Exception):
    """The request was not admitted."""


class QueueFull(AdmissionError):
    pass


class Draining(AdmissionError):
    pass


class SlotPool:
    def __init__(self, slots: int, queue_limit: int) -> None:
        if slots < 1:
            raise ValueError("need at least one slot")
        self.slots = slots
        self.queue_limit = queue_limit
        self._free: list[int] = list(range(slots - 1, -1, -1))  # pop() hands out slot 0 first
        self._waiters: collections.deque[asyncio.Future[int]] = collections.deque()
        self.draining = False

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def running(self) -> int:
        return self.slots - len(self._free)

    @property
    def queue_depth(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def acquire(self) -> int:
        """A slot index; waits in the queue if all are busy. Raises QueueFull / Draining at once."""
        if self.draining:
            raise Draining("daemon is draining: not accepting new work")
        if self._free and not self.queue_depth:
            return self._free.pop()
        if self.queue_depth >= self.queue_limit:
            raise QueueFull(
                f"all {self.slots} slots busy and the queue is full ({self.queue_limit} waiting)"
            )
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())  # granted as we were cancelled: pass it on
            else:
                fut.cancel()
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def release(self, slot: int) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(slot)
                return
        self._free.append(slot)
