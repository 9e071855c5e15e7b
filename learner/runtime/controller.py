"""One controller: process 0 does what only one process may do, every process gets its result.

In a multi-process run (`learner.runtime.distributed`) process 0 owns the farm session, the
exemplar database, the metrics and the report; every process runs the same jitted steps on its
share of the rows. Whatever a step needs that process 0 alone decides (the farm's outcomes, the
exemplars drawn from the database, the known programs' speedups, whether a stage is done) reaches
the others through `share`, and whatever every process produced for its own rows (generated
tokens) reaches all of them through `gather_rows`, so every process builds the same batches.

Two transports, each where it fits:

* `share(name, make)`: process 0 runs `make()` and every process returns its result (or raises
  its exception), pickled through the key-value store of JAX's coordination service and read with
  a blocking get bounded by `wait_timeout_s`. Process 0 may work alone for minutes first (a farm
  wait is bounded by `farm.wait_timeout_s`), which a device collective would not survive: a CPU
  (gloo) collective whose peers arrive 30 s apart fails. Values are sent in chunks, and deleted
  once every process has read them.
* `gather_rows(x)`: the rows of every process, concatenated in process order
  (`multihost_utils.process_allgather`, a device collective), for results of a jitted step that
  every process just ran together.

`local_rows(batch)` is this process's contiguous share of a global host batch (rows in process
order): what `learner.lm.sharding.shard_batch` expects from each process.

Calls are matched across processes by their order (every process makes the same calls in the same
order) and checked by name: a process that asks for another name than process 0 shared at that
position stops with an error instead of using the wrong value. In a single process every helper
is the identity (`make()` runs, nothing is pickled).

A dead peer is not this module's to detect: JAX's coordination service stops every process when
one stops sending heartbeats (`distributed.heartbeat_timeout_s`); see docs/training.md.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import numpy as np

log = logging.getLogger(__name__)

T = TypeVar("T")

CHUNK_BYTES = 1 << 20  # the coordination service's messages stay far below gRPC's 4 MiB default
DEFAULT_WAIT_TIMEOUT_S = 3600.0

_wait_timeout_s = DEFAULT_WAIT_TIMEOUT_S
_seq = 0


class ControllerError(RuntimeError):
    """Process 0's value did not arrive in time, or the processes are out of step."""


def multi_process() -> bool:
    return jax.process_count() > 1


def is_controller() -> bool:
    """Process 0 owns the farm session, the exemplar database, metrics and the report."""
    return jax.process_index() == 0


def set_wait_timeout(seconds: float) -> None:
    """How long a process waits for process 0's value (`distributed.wait_timeout_s`)."""
    global _wait_timeout_s
    if seconds <= 0:
        raise ValueError(f"the wait timeout must be > 0 s, got {seconds}")
    _wait_timeout_s = float(seconds)


def wait_timeout_s() -> float:
    return _wait_timeout_s


def _client() -> Any:
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:  # pragma: no cover - several processes always come from jax.distributed
        raise ControllerError("several JAX processes but no distributed client")
    return client


def share(name: str, make: Callable[[], T], timeout_s: float | None = None) -> T:
    """Process 0's `make()`, returned on every process (its exception raised on every process).

    Only process 0 calls `make`. Every process must call `share` at the same point of the run."""
    if not multi_process():
        return make()
    global _seq
    _seq += 1
    prefix = f"learner/share/{_seq}"
    timeout_ms = int(1000 * (timeout_s or _wait_timeout_s))
    client = _client()
    if is_controller():
        try:
            payload: tuple[str, bool, Any] = (name, True, make())
        except Exception as err:  # noqa: BLE001 - every process raises it (config errors exit 2 everywhere)
            payload = (name, False, err)
        _put(client, prefix, _dumps(payload))
        _after_read(client, prefix, timeout_ms, delete=True)
        if not payload[1]:
            raise payload[2]
        return payload[2]
    data = _get(client, prefix, timeout_ms, name)
    _after_read(client, prefix, timeout_ms, delete=False)
    got_name, ok, value = pickle.loads(data)  # noqa: S301 - written by process 0 of this job
    if got_name != name:
        raise ControllerError(f"process {jax.process_index()} expected {name!r} from process 0 but got "
                              f"{got_name!r}: the processes ran different code paths")
    if not ok:
        raise value
    return value


def _dumps(payload: tuple[str, bool, Any]) -> bytes:
    try:
        return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        if payload[1]:
            raise
        # an exception that does not pickle: send its text
        failed = ControllerError(f"process 0 failed: {payload[2]!r}")
        return pickle.dumps((payload[0], False, failed), protocol=pickle.HIGHEST_PROTOCOL)


def _put(client: Any, prefix: str, data: bytes) -> None:
    chunks = [data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    for i, c in enumerate(chunks):
        client.key_value_set_bytes(f"{prefix}/{i}", c)
    client.key_value_set(f"{prefix}/n", str(len(chunks)))  # last: readers wait on it


def _get(client: Any, prefix: str, timeout_ms: int, name: str) -> bytes:
    try:
        n = int(client.blocking_key_value_get(f"{prefix}/n", timeout_ms))
        return b"".join(client.blocking_key_value_get_bytes(f"{prefix}/{i}", timeout_ms) for i in range(n))
    except Exception as err:  # noqa: BLE001 - DEADLINE_EXCEEDED and friends, said plainly
        raise ControllerError(
            f"process {jax.process_index()} waited {timeout_ms / 1000:.0f} s for {name!r} from process 0 "
            f"(distributed.wait_timeout_s) and got none: {str(err).splitlines()[0][:300]}") from None


def _after_read(client: Any, prefix: str, timeout_ms: int, *, delete: bool) -> None:
    """Every process has read the value: process 0 deletes it."""
    client.wait_at_barrier(f"{prefix}/read", timeout_ms)
    if delete:
        client.key_value_delete(f"{prefix}/")


def barrier(name: str, timeout_s: float | None = None) -> None:
    """Every process reaches this point (no device collective; bounded like `share`)."""
    share(f"barrier:{name}", lambda: None, timeout_s)


def local_rows(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """This process's contiguous share of a global host batch's rows (all of them in one process)."""
    if not multi_process():
        return batch
    n, me = jax.process_count(), jax.process_index()
    out = {}
    for k, v in batch.items():
        v = np.asarray(v)
        if v.shape[0] % n:
            raise ControllerError(f"{k}: {v.shape[0]} rows do not split over {n} processes")
        per = v.shape[0] // n
        out[k] = v[me * per:(me + 1) * per]
    return out


def local_slice(rows: int) -> slice:
    """Which of `rows` global rows this process holds (`local_rows`)."""
    n, me = jax.process_count(), jax.process_index()
    if rows % n:
        raise ControllerError(f"{rows} rows do not split over {n} processes")
    per = rows // n
    return slice(me * per, (me + 1) * per)


def gather_rows(x: np.ndarray) -> np.ndarray:
    """Every process's rows of `x` (same shape on each), concatenated in process order."""
    if not multi_process():
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(np.asarray(x), tiled=True))
