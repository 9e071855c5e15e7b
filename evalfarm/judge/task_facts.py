"""What one evaluation's judge learned about a task, handed to the next judge of the same task.

RL sends G candidates per task in a row. Some of a judge's set-up depends only on the task, not
on the candidate or the secret seed: the task's device-memory footprint (input, weight and output
bytes and the peak of one reference call, ``evalfarm.judge.memory_plan``). A judge without it
estimates it from shapes on PyTorch's meta device, whose first use in a process imports
``torch._dynamo`` (4-7 s on the GPU host; a standby judge does it while it waits, but one taken
soon after it started up waits for it). With the footprint the previous judge of the task
*measured*, the next one plans its memory at once, with a better number.

Only trusted facts go in: the judge measures them from the reference, in its own process, and
they reach this store through its result. Nothing here depends on a seed, an input or a candidate,
so sharing them tells a candidate nothing. A fact that does not validate is ignored: the judge
then estimates it as before. The store is bounded (least recently used out).
"""

from __future__ import annotations

import collections
import hashlib
import json
import threading
from typing import Any

FOOTPRINT_FIELDS = ("input_bytes", "weight_bytes", "output_bytes", "call_peak_bytes")
MAX_TASKS = 512


def task_key(task_source: str, size_profiles: Any, size_profile: str, device: str) -> str:
    """The task as a judge sees it: its source, its size profiles, the profile asked for, and
    the kind of device (``cuda:1`` and ``cuda:0`` are one kind)."""
    h = hashlib.sha256()
    for part in (task_source, json.dumps(size_profiles, sort_keys=True, default=str), size_profile,
                 device.split(":")[0]):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def valid_footprint(fp: Any) -> dict[str, int] | None:
    """A measured footprint as the judge reports it (``evidence.memory["footprint"]``), or None."""
    if not isinstance(fp, dict) or fp.get("measured") is not True:
        return None
    out = {}
    for name in FOOTPRINT_FIELDS:
        v = fp.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return None
        out[name] = v
    return out


class TaskFacts:
    """Facts per task key, thread-safe, the ``max_tasks`` most recently used kept."""

    def __init__(self, max_tasks: int = MAX_TASKS) -> None:
        if max_tasks < 1:
            raise ValueError(f"max_tasks must be >= 1, got {max_tasks}")
        self.max_tasks = max_tasks
        self._facts: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> dict[str, Any]:
        """The facts known for ``key`` (a copy; empty when none)."""
        with self._lock:
            facts = self._facts.get(key)
            if facts is None:
                self.misses += 1
                return {}
            self._facts.move_to_end(key)
            self.hits += 1
            return {name: dict(value) for name, value in facts.items()}

    def note(self, key: str, memory_evidence: Any) -> None:
        """Keep what a judge's result says about its task (its ``evidence.memory``)."""
        fp = valid_footprint(memory_evidence.get("footprint")) if isinstance(memory_evidence, dict) else None
        if fp is None:
            return
        with self._lock:
            self._facts[key] = {"footprint": {**fp, "measured": True}}
            self._facts.move_to_end(key)
            while len(self._facts) > self.max_tasks:
                self._facts.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._facts)
