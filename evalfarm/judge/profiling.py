"""The candidate worker's ``profile`` op: one extra, untimed call under ``torch.profiler``.

The judge asks for it only after the verdict's rounds are done, with fresh inputs written into
the worker's input slots, and names the directory the trace goes to (inside the worker's private
directory; the judge copies it out, ``evalfarm.judge.diagnose.collect_trace``). The call is never
part of a timed round, so profiling overhead cannot reach a score.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

RANGE_NAME = "evalfarm_profiled_call"


def profile_call(model: Callable[..., Any], args: list[Any], out_dir: str, sync: Callable[[], None],
                 is_cuda: bool) -> list[str]:
    """Run ``model(*args)`` once under the torch profiler; write ``trace.json`` (Chrome trace
    format, for chrome://tracing or Perfetto) and ``key_averages.txt`` (the operator table) into
    ``out_dir``; return the file names written."""
    from torch.profiler import ProfilerActivity, profile, record_function

    os.makedirs(out_dir, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if is_cuda else [])
    sync()
    with profile(activities=activities, record_shapes=True) as prof:
        with record_function(RANGE_NAME):
            model(*args)
            sync()
    prof.export_chrome_trace(os.path.join(out_dir, "trace.json"))
    sort_by = "cuda_time_total" if is_cuda else "cpu_time_total"
    with open(os.path.join(out_dir, "key_averages.txt"), "w") as f:
        f.write(prof.key_averages().table(sort_by=sort_by, row_limit=50) + "\n")
    return ["trace.json", "key_averages.txt"]
