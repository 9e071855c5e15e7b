"""Admission control: a fixed set of slots and two bounded FIFO queues in front of them.

`acquire()` decides at once: a free slot, a place in a queue, or an exception
(QueueFull -> RESOURCE_EXHAUSTED, Draining -> UNAVAILABLE). A waiter that is cancelled
(deadline, client gone, drain) leaves its queue; a slot granted to a cancelled waiter is
handed on, so slots are never leaked.

Re-verifications (`acquire(priority=True)`) wait in their own queue, which a freed slot
serves first: a re-verification runs next, ahead of every queued ordinary request. They
are admitted even when the ordinary queue is full; their own queue holds at most
max(slots, queue_limit).

A slot can be taken out of service (`take_out`, by evalfarm.server.slot_health): it finishes
what it runs, is then withheld from every queue, and comes back with `put_back`. With every
slot out of service, `acquire` raises NoSlots (-> UNAVAILABLE: the client goes elsewhere).
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


class NoSlots(AdmissionError):
    """Every slot is out of service."""


class SlotPool:
    def __init__(self, slots: int, queue_limit: int) -> None:
        if slots < 1:
            raise ValueError("need at least one slot")
        self.slots = slots
        self.queue_limit = queue_limit
        self._free: list[int] = list(range(slots - 1, -1, -1))  # pop() hands out slot 0 first
        self._waiters: collections.deque[asyncio.Future[int]] = collections.deque()
        self._urgent: collections.deque[asyncio.Future[int]] = collections.deque()  # re-verifications
        self.priority_limit = max(slots, queue_limit)
        self.draining = False
        self.out_of_service: set[int] = set()
        self._idle_out: set[int] = set()  # out of service and not running anything
        self._idle_out_changed = asyncio.Event()

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def running(self) -> int:
        return self.slots - len(self._free) - len(self._idle_out)

    @property
    def in_service(self) -> int:
        return self.slots - len(self.out_of_service)

    def busy(self, slot: int) -> bool:
        return slot not in self._free and slot not in self._idle_out

    def take_out(self, slot: int) -> None:
        """No new work for `slot`; what it runs now finishes. Waiters fail when none is left."""
        if slot in self.out_of_service:
            return
        self.out_of_service.add(slot)
        if slot in self._free:
            self._free.remove(slot)
            self._mark_idle_out(slot)
        if self.in_service == 0:
            err = NoSlots(f"all {self.slots} slots are out of service")
            for queue in (self._urgent, self._waiters):
                while queue:
                    fut = queue.popleft()
                    if not fut.done():
                        fut.set_exception(err)

    def put_back(self, slot: int) -> None:
        """Return an out-of-service slot (idle, see `wait_idle_out`) to the pool."""
        if slot not in self.out_of_service:
            return
        self.out_of_service.discard(slot)
        if slot in self._idle_out:
            self._idle_out.discard(slot)
            self.release(slot)

    async def wait_idle_out(self, slot: int) -> None:
        """Until an out-of-service slot has finished what it was running."""
        while slot in self.out_of_service and slot not in self._idle_out:
            self._idle_out_changed.clear()
            await self._idle_out_changed.wait()

    def _mark_idle_out(self, slot: int) -> None:
        self._idle_out.add(slot)
        self._idle_out_changed.set()

    @property
    def queue_depth(self) -> int:
        """Waiting requests, re-verifications included."""
        return self.ordinary_depth + self.priority_depth

    @property
    def ordinary_depth(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    @property
    def priority_depth(self) -> int:
        return sum(1 for w in self._urgent if not w.done())

    async def acquire(self, priority: bool = False) -> int:
        """A slot index; waits in a queue if all are busy. Raises QueueFull / Draining at once.

        ``priority``: a re-verification; it waits ahead of every ordinary request.
        """
        if self.draining:
            raise Draining("daemon is draining: not accepting new work")
        if self.in_service == 0:
            raise NoSlots(f"all {self.slots} slots are out of service")
        if self._free and not self.queue_depth:
            return self._free.pop()
        if priority:
            if self.priority_depth >= self.priority_limit:
                raise QueueFull(f"all {self.slots} slots busy and {self.priority_limit} re-verifications waiting")
            queue = self._urgent
        else:
            if self.ordinary_depth >= self.queue_limit:
                raise QueueFull(
                    f"all {self.slots} slots busy and the queue is full ({self.queue_limit} waiting)"
                )
            queue = self._waiters
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        queue.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())  # granted as we were cancelled: pass it on
            else:
                fut.cancel()
                try:
                    queue.remove(fut)
                except ValueError:
                    pass
            raise

    def release(self, slot: int) -> None:
        """Hand the slot to the first re-verification waiting, else the first ordinary waiter."""
        if slot in self.out_of_service:
            self._mark_idle_out(slot)
            return
        for queue in (self._urgent, self._waiters):
            while queue:
                fut = queue.popleft()
                if not fut.done():
                    fut.set_result(slot)
                    return
        self._free.append(slot)
