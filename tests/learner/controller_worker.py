"""One process of a small `jax.distributed` job on loopback (started by test_controller.py).

It exercises `learner.runtime.controller` with no model: `share` (process 0's value reaches
every process, chunked when large; process 0's exception is raised everywhere; a process that
asks for another name stops), `gather_rows` and `local_rows` (rows in process order), and writes
what it saw as JSON to argv[1] + its process index.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]

import jax  # noqa: E402
import numpy as np  # noqa: E402

from learner.runtime import controller  # noqa: E402
from learner.runtime.distributed import DistributedConfig, maybe_initialize_distributed  # noqa: E402


def main() -> None:
    assert maybe_initialize_distributed(DistributedConfig(mode="auto", wait_timeout_s=60))
    me, n = jax.process_index(), jax.process_count()
    seen: dict[str, object] = {"process": me, "count": n}
    calls = []

    def make(value: object) -> object:
        calls.append(value)
        return value

    # process 0's value, whatever the others would have computed
    seen["small"] = controller.share("small", lambda: make({"from": jax.process_index(), "rows": [3, 1, 2]}))
    big = "x" * (3 * controller.CHUNK_BYTES + 17)  # four chunks through the key-value store
    seen["big_ok"] = controller.share("big", lambda: make(big)) == big
    try:
        controller.share("fails", lambda: (_ for _ in ()).throw(ValueError("process 0 says no")))
    except ValueError as err:
        seen["error"] = str(err)
    seen["calls_made"] = len(calls)  # only process 0 runs make()
    rows = np.arange(4 * n).reshape(2 * n, 2)  # the same global batch on every process
    mine = controller.local_rows({"r": rows})["r"]
    seen["local"] = mine.tolist()
    seen["gathered"] = controller.gather_rows(mine * 10).tolist()
    # a process that asks for another name than process 0 shared stops with an error
    try:
        controller.share("name-a" if me == 0 else "name-b", lambda: 1)
        seen["mismatch"] = "none"
    except controller.ControllerError as err:
        seen["mismatch"] = str(err)
    controller.barrier("end")
    Path(f"{sys.argv[1]}{me}").write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
