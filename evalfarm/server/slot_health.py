"""Per-slot health: one sick GPU must not poison a run.

A slot whose evaluations end in CUDA_FAULT, TIMEOUT or INFRA_ERROR `fault_threshold` times in
a row (any other verdict resets the count; a deadline or a drain is not the slot's doing) is
taken out of service: it finishes what it runs and gets no new work. The daemon then runs a
known-good probe on it (a shipped honest candidate of a built-in task, with a small budget):

* the probe passes: the faults were the candidates' own; the slot goes back into service.
* the probe fails: the slot stays out (Capacity, the per-slot health service name
  `evalfarm.v1.EvalFarm/slot/<i>` and `evalfarm_slot_in_service` say so, with the reason), the
  result that tripped it becomes INFRA_ERROR (the client retries it on another slot), and the
  probe is retried with a growing interval until one passes.

The fault-injection hook for tests (`FaultInjector`) is off unless the daemon's environment
sets EVALFARM_FAULT_INJECTION_FILE; nothing in a request can reach it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from evalfarm.config import ScoreConfig
from evalfarm.result import ScoreResult
from evalfarm.tasks import Candidate, Task
from evalfarm.verdict import Verdict

log = logging.getLogger(__name__)

FAULT_VERDICTS = frozenset({Verdict.CUDA_FAULT, Verdict.TIMEOUT, Verdict.INFRA_ERROR})
FAULT_INJECTION_ENV = "EVALFARM_FAULT_INJECTION_FILE"
PROBE_TASK = "L1/1"
PROBE_VARIANT = "fast_any_builtin_tanh_gelu.py"
PROBE_CONFIG = ScoreConfig(num_correctness_inputs=8, timing_budget_s=0.5, min_timed_rounds=7,
                           reverify_above=0.0)


@dataclasses.dataclass(frozen=True)
class HealthPolicy:
    fault_threshold: int = 3  # faults in a row that take a slot out; 0 never does
    probe_interval_s: float = 60.0  # first retry of a failed probe; doubles up to the max
    probe_max_interval_s: float = 900.0
    probe_timeout_s: float = 600.0


@dataclasses.dataclass
class SlotState:
    index: int
    device: str
    gpu_name: str = ""
    gpu_uuid: str = ""
    in_service: bool = True
    consecutive_faults: int = 0
    reason: str = ""
    recent: collections.deque[str] = dataclasses.field(default_factory=lambda: collections.deque(maxlen=3))


def is_slot_fault(result: ScoreResult) -> bool:
    if result.verdict not in FAULT_VERDICTS:
        return False
    cause = result.cause  # an INFRA_ERROR counts only where its cause is the slot's (evalfarm.infra_cause)
    return cause is None or cause.slots_fault


def probe_candidate() -> tuple[Task, Candidate]:
    """The known-good probe: an honest shipped variant of a small built-in task."""
    from evalfarm.tasks.suite import builtin_suite

    suite = builtin_suite()
    task = suite.load(PROBE_TASK)
    variant = next(v for v in suite.variants(PROBE_TASK) if v.path.name == PROBE_VARIANT)
    return task, variant.load()


class FaultInjector:
    """Test hook: evaluations on the slots listed in a file (e.g. "0,2") end in CUDA_FAULT.

    The file is re-read before every evaluation, so a test can make a slot sick and healthy
    again. Enabled only by the daemon's environment (EVALFARM_FAULT_INJECTION_FILE).
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def from_env(cls) -> FaultInjector | None:
        value = os.environ.get(FAULT_INJECTION_ENV)
        if not value:
            return None
        log.warning("event=fault_injection_enabled file=%s: slots listed there fail every evaluation", value)
        return cls(Path(value))

    def faulty(self, slot: int) -> bool:
        try:
            text = self.path.read_text()
        except OSError:
            return False
        return str(slot) in text.replace(",", " ").split()

    @staticmethod
    def result(task: Task, candidate: Candidate, slot: int) -> ScoreResult:
        return ScoreResult.failure(Verdict.CUDA_FAULT, f"injected fault on slot {slot} ({FAULT_INJECTION_ENV})",
                                   task=task.name, candidate_sha256=candidate.sha256)


ProbeRunner = Callable[[int], Awaitable[ScoreResult]]


class SlotHealth:
    """Counts faults per slot, takes slots out of service, probes them back in."""

    def __init__(
        self,
        states: list[SlotState],
        policy: HealthPolicy,
        *,
        take_out: Callable[[int], None],
        wait_idle: Callable[[int], Awaitable[None]],
        put_back: Callable[[int], None],
        run_probe: ProbeRunner,
        on_change: Callable[[SlotState], None] = lambda _s: None,
        on_probe: Callable[[SlotState, bool], None] = lambda _s, _ok: None,
    ) -> None:
        self.states = states
        self.policy = policy
        self._take_out, self._wait_idle, self._put_back = take_out, wait_idle, put_back
        self._run_probe = run_probe
        self._on_change = on_change
        self._on_probe = on_probe
        self._first_probe: dict[int, asyncio.Future[bool]] = {}
        self._loops: dict[int, asyncio.Task[None]] = {}

    def observe(self, slot: int, result: ScoreResult) -> bool:
        """Record a slot's result; True when it has just reached the fault threshold."""
        state = self.states[slot]
        if not is_slot_fault(result):
            state.consecutive_faults = 0
            return False
        state.consecutive_faults += 1
        state.recent.append(f"{result.verdict.value}: {result.detail[:120]}")
        threshold = self.policy.fault_threshold
        return threshold > 0 and state.in_service and state.consecutive_faults >= threshold

    async def suspect(self, slot: int) -> bool:
        """Take the slot out and probe it; True when the probe passed and it is back in service."""
        fut = self._first_probe.get(slot)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._first_probe[slot] = fut
            state = self.states[slot]
            state.in_service = False
            state.reason = (f"{state.consecutive_faults} faults in a row ({'; '.join(state.recent)}); "
                            "probing with a known-good kernel")
            log.warning("event=slot_out_of_service slot=%d gpu_uuid=%s reason=%s", slot, state.gpu_uuid,
                        state.reason)
            self._take_out(slot)
            self._on_change(state)
            self._loops[slot] = asyncio.ensure_future(self._probe_loop(slot, fut))
        return await asyncio.shield(fut)

    async def _probe_loop(self, slot: int, first: asyncio.Future[bool]) -> None:
        state = self.states[slot]
        interval = self.policy.probe_interval_s
        try:
            await self._wait_idle(slot)
            while True:
                try:
                    result = await asyncio.wait_for(self._run_probe(slot), self.policy.probe_timeout_s)
                    passed = result.verdict is Verdict.OK
                    why = "" if passed else f"{result.verdict.value}: {result.detail[:200]}"
                except TimeoutError:
                    passed, why = False, f"probe did not finish in {self.policy.probe_timeout_s:.0f}s"
                except Exception as err:  # noqa: BLE001 - the probe could not run: the slot stays out
                    passed, why = False, f"probe could not run: {err!r}"
                self._on_probe(state, passed)
                if passed:
                    state.in_service, state.consecutive_faults, state.reason = True, 0, ""
                    state.recent.clear()
                    self._put_back(slot)
                    log.warning("event=slot_in_service slot=%d gpu_uuid=%s", slot, state.gpu_uuid)
                    self._on_change(state)
                    if not first.done():
                        first.set_result(True)
                    return
                state.reason = f"failed its known-good probe ({why}); next probe in {interval:.0f}s"
                log.warning("event=slot_probe_failed slot=%d gpu_uuid=%s why=%s next_s=%.0f", slot,
                            state.gpu_uuid, why, interval)
                self._on_change(state)
                if not first.done():
                    first.set_result(False)
                await asyncio.sleep(interval)
                interval = min(2 * interval, self.policy.probe_max_interval_s)
        finally:
            if not first.done():
                first.set_result(False)
            self._first_probe.pop(slot, None)
            self._loops.pop(slot, None)

    def stop(self) -> None:
        """Cancel probe loops (drain)."""
        for task in list(self._loops.values()):
            task.cancel()
