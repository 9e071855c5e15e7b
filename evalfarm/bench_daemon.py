"""A daemon benchmark: a stream of candidates through a real `evalfarm serve`, as RL sends them.

    python -m evalfarm.bench_daemon --device cuda --out bench-daemon/   # 200 candidates, G=8
    make bench-daemon DEVICE=cpu                                         # a short CPU smoke run

This is the benchmark that decides the farm's throughput. The stream takes G candidates per task,
round-robin over the built-in tasks that have variants for the device and, with a KernelBench
checkout (``--kernelbench-root``, ``--kb-tasks``), KernelBench problems, the two suites taking
turns. A built-in task gives its shipped fast and wrong variants; every task gives an identical
copy of its reference and a slow one (the reference's forward computed twice), and a KernelBench
task a wrong one too (the reference's output times 1.01). Each is made unique (a trailing
comment) so every one is a fresh evaluation (extension builds are cached by their sources, so a
CUDA build is paid once per variant; the first-build seconds are reported apart). All are
submitted at once through FarmClient, which keeps the daemon's queue and builders fed as its
credits allow. Reported (printed, and written as ``bench_daemon.json`` and ``bench_daemon.md``
under ``--out``), every per-candidate figure from the result's own evidence:

* candidates per GPU-hour (per slot-hour on a CPU): candidates / (wall hours x slots);
* slot seconds per candidate (median, p95): the evaluation's wall seconds (``phases_s["total"]``)
  less its wait for the build and its GPU-lease wait; the protocol's own device work
  (``phases_s["rounds_calls"]``: the workers' timed calls, correctness and timing together, by the
  workers' clocks) and the overhead (slot seconds less that work), and slot / work;
* candidates per minute, latency (submission to result) and the evaluation's seconds by phase;
* re-checks: results re-verified (``evidence.reverified``) and checked at another size
  (``evidence.other_sizes``), with the seconds the evidence gives;
* task windows (``evidence.task_window``): candidates a window's judge scored, set-ups shared;
* the daemon's queue depth over time (its Capacity RPC, sampled every ``--sample-every`` seconds);
* GPU busy fraction: NVML utilisation sampled over the stream (GPU only, when NVML loads);
* the reward CV: ``--rescore`` candidates (fast variants first) scored ``--repeats`` times each,
  fresh every time, with the reference's per-call time;
* the farm's targets beside the measured values (``TARGETS``).

The numbers describe the machine it ran on; docs/benchmarks.md keeps the method and results.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalfarm.server.local import LocalDaemon, LocalDaemonError

if TYPE_CHECKING:
    from evalfarm.v1 import evalfarm_pb2 as pb

log = logging.getLogger("evalfarm.bench_daemon")


# The farm's throughput targets, stated beside the measured values.
TARGETS = {
    "slot_work_factor": 1.3,  # median slot seconds <= 1.3 x the protocol's device work + 0.5 s
    "slot_fixed_s": 0.5,
    "gpu_busy_min": 0.70,  # NVML utilisation over the stream
    "reward_cv_max": 0.005,  # for kernels whose reference call takes ...
    "reward_cv_min_ref_us": 20.0,  # ... this long or longer
}

# The KernelBench checkout looked for when --kernelbench-root is not given: next to the repository.
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_KERNELBENCH_ROOT = REPO_ROOT.parent / "shared" / "kernelbench"
# Short KernelBench problems (problem files under <root>/KernelBench) the stream takes by default.
# KernelBench's own sizes are GPU sizes: on a CPU only the cheapest of them (a diagonal matmul of
# 4096 x 4096, about 18 ms a call on 2 cores, 15-50 s an evaluation; level2/6 takes 0.2 s a call).
KB_TASKS_DEFAULT = {
    "cuda": ("level1/12_Matmul_with_diagonal_matrices_.py",
             "level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py",
             "level2/6_Conv3d_Softmax_MaxPool_MaxPool.py", "level2/68_Matmul_Min_Subtract.py"),
    "cpu": ("level1/12_Matmul_with_diagonal_matrices_.py",),
}
_KB_FILE_RE = re.compile(r"^level(\d+)/(\d+)_\w+\.py$")
WRONG_FACTOR = 1.01  # the generated wrong variant's output scale: 1% off fails a 1e-4 relative L2 tolerance


@dataclasses.dataclass(frozen=True)
class StreamItem:
    task: str  # as reported: a built-in id ("L1/1") or "KB level1/19_ReLU"
    variant: str  # variant file name, or "identical" | "slow" | "wrong" (generated)
    kind: str  # "fast" | "wrong" | "identical" | "slow"
    source: str
    suite: str = "builtin"  # "builtin" | "kernelbench"
    wire: str = ""  # the task's name on the wire ("builtin:L1/1"; "L1/19" for a daemon's KernelBench root)
    task_sha256: str = ""  # the reference's SHA-256: a daemon whose task of that name differs refuses it

    def task_ref(self) -> pb.TaskRef:
        """The task as the request names it (a TaskRef with the reference's hash, where known)."""
        from evalfarm.v1 import evalfarm_pb2

        return evalfarm_pb2.TaskRef(name=self.wire or self.task, sha256=self.task_sha256)


def identical_source(task_source: str) -> str:
    """The task's reference as a candidate (renamed to ModelNew): it must score 1.00."""
    return task_source.replace("class Model(", "class ModelNew(").replace("super(Model, self)", "super(ModelNew, self)")


def slow_source(task_source: str) -> str:
    """A correct candidate that does the reference's work twice: its forward computes the
    reference's forward twice and returns the second result (about 0.5x)."""
    return task_source + (
        "\n\n# bench-daemon: slow variant (the reference's forward, twice)\n"
        "class ModelNew(Model):\n"
        "    def forward(self, *args, **kwargs):\n"
        "        super().forward(*args, **kwargs)\n"
        "        return super().forward(*args, **kwargs)\n")


def wrong_source(task_source: str, factor: float = WRONG_FACTOR) -> str:
    """An incorrect candidate: the reference's output with every floating tensor in it times
    ``factor`` (integer tensors plus one), so a 1e-4 relative tolerance fails it."""
    return task_source + (
        "\n\n# bench-daemon: wrong variant (the reference's output, perturbed)\n"
        "import torch as _bench_torch\n\n\n"
        "def _bench_perturb(out):\n"
        "    if isinstance(out, _bench_torch.Tensor):\n"
        f"        return out * {factor!r} if out.is_floating_point() else out + 1\n"
        "    if isinstance(out, (tuple, list)):\n"
        "        return type(out)(_bench_perturb(o) for o in out)\n"
        "    return out\n\n\n"
        "class ModelNew(Model):\n"
        "    def forward(self, *args, **kwargs):\n"
        "        return _bench_perturb(super().forward(*args, **kwargs))\n")


def builtin_task_items(device: str, tasks: Sequence[str] | None = None) -> list[list[StreamItem]]:
    """Per built-in task with variants for ``device``: its shipped variants, an identical copy
    and a slow one. ``tasks`` (ids, in that order) limits them to those tasks."""
    from evalfarm.tasks import builtin_suite

    suite = builtin_suite()
    known = {f"L{entry.level}/{entry.number}": entry for entry in suite.entries}
    keys = list(known)
    if tasks:
        unknown = [t for t in tasks if t not in known]
        if unknown:
            raise SystemExit(f"--tasks: no built-in task {', '.join(unknown)}; the built-in tasks are "
                             f"{', '.join(keys)}")
        keys = list(dict.fromkeys(tasks))
    per_task: list[list[StreamItem]] = []
    for key in keys:
        variants = [v for v in suite.variants(key) if v.runs_on(device)]
        if not variants:
            if tasks:
                raise SystemExit(f"--tasks: built-in task {key} has no variants for device {device!r}")
            continue
        task = suite.load(key)
        ids = ("builtin", f"builtin:{key}", task.sha256)
        items = [StreamItem(key, v.path.name, v.kind, v.load().source, *ids) for v in variants]
        items.append(StreamItem(key, "identical", "identical", identical_source(task.source), *ids))
        items.append(StreamItem(key, "slow", "slow", slow_source(task.source), *ids))
        per_task.append(items)
    return per_task


def kernelbench_task_items(root: Path, names: Sequence[str]) -> list[list[StreamItem]]:
    """Per KernelBench problem (``level1/19_ReLU.py``, under ``<root>/KernelBench``): an identical
    copy of its reference, a wrong and a slow variant. The daemon resolves ``L<level>/<id>`` in its
    own ``--kernelbench-root``, so the task is sent by that name, with its reference's hash (a
    daemon without that checkout refuses it rather than scoring another task of the name)."""
    from evalfarm.tasks import kernelbench_suite
    from evalfarm.tasks.suite import UnknownTaskError

    try:
        suite = kernelbench_suite(root)
    except UnknownTaskError as err:
        raise SystemExit(f"--kernelbench-root: {err}") from None
    per_task: list[list[StreamItem]] = []
    for raw in names:
        name = raw if raw.endswith(".py") else raw + ".py"
        m = _KB_FILE_RE.match(name)
        if m is None or not (suite.root / name).is_file():
            raise SystemExit(f"--kb-tasks: no KernelBench problem {raw!r} under {suite.root} "
                             "(give level<L>/<id>_<Name>.py, e.g. level1/19_ReLU.py)")
        wire = f"L{int(m.group(1))}/{int(m.group(2))}"
        ref = suite.load(wire)
        label, ids = f"KB {name.removesuffix('.py')}", ("kernelbench", wire, ref.sha256)
        per_task.append([StreamItem(label, "identical", "identical", identical_source(ref.source), *ids),
                         StreamItem(label, "wrong", "wrong", wrong_source(ref.source), *ids),
                         StreamItem(label, "slow", "slow", slow_source(ref.source), *ids)])
    return per_task


def interleave(first: list[list[StreamItem]], second: list[list[StreamItem]]) -> list[list[StreamItem]]:
    """The two suites' tasks taking turns (first[0], second[0], first[1], ...), the longer one's
    rest at the end."""
    out: list[list[StreamItem]] = []
    for i in range(max(len(first), len(second))):
        out += [group[i] for group in (first, second) if i < len(group)]
    return out


def cycle_stream(per_task: list[list[StreamItem]], n: int, group: int) -> list[StreamItem]:
    """``n`` candidates, ``group`` per task in turn (each task's items cycled), each source unique."""
    if not per_task:
        raise SystemExit("the stream has no task")
    stream: list[StreamItem] = []
    t = 0
    while len(stream) < n:
        items = per_task[t % len(per_task)]
        for g in range(min(group, n - len(stream))):
            it = items[g % len(items)]
            stream.append(dataclasses.replace(it, source=it.source + f"\n# bench-daemon sample {len(stream)}\n"))
        t += 1
    return stream


def build_stream(device: str, n: int, group: int, tasks: list[str] | None = None,
                 kernelbench_root: Path | None = None, kb_tasks: Sequence[str] = (),
                 builtin: bool = True) -> list[StreamItem]:
    """``n`` candidates, ``group`` per task in turn, each source unique; ``tasks`` (built-in ids,
    e.g. ``["L1/7", "L3/1"]``, in that order) limits the stream to those tasks; ``kb_tasks``
    (KernelBench problem files under ``kernelbench_root``) adds those, taking turns with the
    built-in tasks; ``builtin=False`` leaves the built-in tasks out."""
    dev = "cuda" if device.startswith("cuda") else "cpu"
    mine = builtin_task_items(dev, tasks) if builtin else []
    kb: list[list[StreamItem]] = []
    if kb_tasks:
        if kernelbench_root is None:
            raise SystemExit("--kb-tasks needs a KernelBench checkout (--kernelbench-root)")
        kb = kernelbench_task_items(kernelbench_root, kb_tasks)
    if not mine and not kb:
        raise SystemExit(f"no built-in task has variants for device {device!r} and no KernelBench task was given")
    return cycle_stream(interleave(mine, kb), n, group)


def item_options(item: StreamItem, options: Mapping[str, Any]) -> dict[str, Any]:
    """The stream's scoring options for one item: a KernelBench problem declares no size profiles,
    so it runs at its own sizes (no ``size_profile``)."""
    out = dict(options)
    if item.suite == "kernelbench":
        out.pop("size_profile", None)
    return out


class Sampler(threading.Thread):
    """Samples the daemon's queue depth (Capacity) and, on a GPU, NVML utilisation."""

    def __init__(self, client: Any, every_s: float, gpu: bool) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.client, self.every_s = client, every_s
        self.queue: list[tuple[float, int, int]] = []  # (seconds, queue depth, running)
        self.util: list[float] = []  # mean over the host's GPUs, per sample
        self.util_per_gpu: list[list[float]] = []
        self.slots: int | None = None  # from the daemon's Capacity
        self.gpu_model = ""
        self._halt = threading.Event()
        self._nvml: Any = None
        if gpu:
            try:
                import pynvml

                pynvml.nvmlInit()
                handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
                self._nvml = (pynvml, handles)
            except Exception as err:  # noqa: BLE001 - GPU busy is then reported as unknown
                log.warning("no NVML (%s): GPU busy fraction not measured", err)
        self.t0 = time.monotonic()

    def run(self) -> None:
        while not self._halt.wait(self.every_s):
            try:
                caps = self.client._call(self.client._client.capacity(), 10.0)  # noqa: SLF001
                cap = next(iter(caps.values()))
                if cap is not None:
                    self.queue.append((round(time.monotonic() - self.t0, 2), cap.queue_depth, cap.running))
                    self.slots = int(cap.slots)
                    self.gpu_model = str(getattr(cap, "gpu_model", "") or "")
            except Exception as err:  # noqa: BLE001 - a missed sample is not a failed run
                log.debug("capacity sample failed: %s", err)
            if self._nvml is not None:
                nv, handles = self._nvml
                per = [float(nv.nvmlDeviceGetUtilizationRates(h).gpu) for h in handles]
                self.util_per_gpu.append(per)
                self.util.append(statistics.fmean(per) if per else 0.0)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


class Interrupted(Exception):
    """SIGTERM (e.g. from `timeout`): stop and report what finished."""


def _on_term(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second TERM must not cut the report short
    raise Interrupted


def slot_figures(phases: Mapping[str, float]) -> dict[str, float | None]:
    """One evaluation's slot seconds (its wall seconds, ``total``, less its wait for the build and
    its GPU-lease wait), the protocol's device work (``rounds_calls``: the workers' timed calls,
    correctness and timing together) and the overhead (slot less work). None where the evidence
    lacks the figure (no ``total``: the evaluation did not run to the end in a daemon)."""
    total = phases.get("total")
    work = phases.get("rounds_calls")
    slot = None if total is None else max(0.0, total - phases.get("build", 0.0) - phases.get("gpu_lease_wait", 0.0))
    return {"slot_s": slot, "work_s": work,
            "overhead_s": None if slot is None or work is None else slot - work}


def recheck_marks(reverified: Mapping[str, Any], other_sizes: Mapping[str, Any], phases: Mapping[str, float],
                  detail: str) -> dict[str, Any]:
    """Which re-checks one result went through, from its evidence. A re-verification (a second
    measurement of an outlier score, evalfarm.reverify) always leaves ``evidence.reverified``
    (status: agreed, disagreed, failed or not_reverified); a ``reverify`` phase or a note in the
    detail marks one too. The other-size check (evalfarm.other_sizes) leaves
    ``evidence.other_sizes``; it ran (a second, correctness-only evaluation) where it has a
    verdict, and ``phases_s["other_sizes"]`` holds its seconds; a re-verification's seconds are
    ``evidence.reverified["seconds"]`` (the second measurement's evaluation)."""
    status = reverified.get("status")
    if not status and (any(k.startswith("reverify") for k in phases)
                       or "re-verification" in detail or "re-measurement" in detail):
        status = "unknown"
    ran = bool(other_sizes) and other_sizes.get("verdict") is not None
    seconds = phases.get("other_sizes", other_sizes.get("seconds") if ran else None)
    rv_s = reverified.get("seconds") if status else None
    return {"reverified": status or None, "reverify_where": reverified.get("where") if status else None,
            "reverify_s": float(rv_s) if isinstance(rv_s, int | float) else None,
            "other_sizes": other_sizes.get("status") if other_sizes else None, "other_sizes_ran": ran,
            "other_sizes_s": float(seconds) if ran and seconds is not None else None}


def result_row(it: StreamItem, res: Any, latency_s: float) -> dict[str, Any]:
    """One row of the JSON per result (``res``: a client SampleResult), the per-candidate figures with it."""
    r = res.result
    ev = r.evidence
    phases = dict(ev.phases_s)
    return {
        "sample_id": res.sample_id, "task": it.task, "suite": it.suite, "variant": it.variant, "kind": it.kind,
        "verdict": r.verdict.value, "speedup": r.speedup, "latency_s": latency_s,
        "phases_s": phases, "seconds": ev.timing.seconds if ev.timing else None,
        "block_rounds": ev.timing.block_rounds if ev.timing else None,
        "blocks": ev.timing.blocks if ev.timing else None,
        "timed_rounds": ev.timing.rounds if ev.timing else None,
        "ref_time_us": ev.timing.ref_time_us_median if ev.timing and ev.timing.ref_time_us_median else None,
        "cand_time_us": ev.timing.cand_time_us_median if ev.timing and ev.timing.cand_time_us_median else None,
        # what was added to every candidate call for its excess (evalfarm.judge.charges; the larger applies)
        "pre_call_charge_us": ev.timing.pre_call_charge_us if ev.timing else None,
        "exchange_charge_us": ev.timing.exchange_charge_us if ev.timing else None,
        "build_s": sum(float(e.get("seconds", 0) or 0) for e in ev.build.get("extensions", [])
                       if isinstance(e, dict) and not e.get("cache_hit")),
        **slot_figures(phases),
        **recheck_marks(ev.reverified, ev.other_sizes, phases, r.detail or ""),
        "task_window": dict(getattr(ev, "task_window", None) or {}),  # where a judge served several candidates
        "detail": (r.detail or "")[:300],
        "done_at": time.monotonic(),
    }


def run_stream(client: Any, stream: list[StreamItem], options: dict[str, Any], timeout_s: float,
               rows: list[dict[str, Any]]) -> None:
    """Submit the stream and append one row per result to ``rows`` as results arrive."""
    from tqdm import tqdm

    sent: dict[str, tuple[StreamItem, float]] = {}
    for i, it in enumerate(stream):
        sid = client.submit(it.task_ref(), it.source, f"bench-{i}", options=item_options(it, options))
        sent[sid] = (it, time.monotonic())
    with tqdm(total=len(stream), desc="candidates", unit="cand") as bar:
        for res in client.results(timeout=timeout_s):
            it, t_sent = sent[res.sample_id]
            rows.append(result_row(it, res, time.monotonic() - t_sent))
            bar.update(1)


def pick_rescore(stream: list[StreamItem], count: int) -> list[StreamItem]:
    """``count`` distinct candidates of the stream for the reward CV: fast variants first, then
    identical copies (of tasks not picked yet), in stream order."""
    picked: list[StreamItem] = []
    for kind in ("fast", "identical"):
        for it in stream:
            seen = {(p.task, p.variant) for p in picked}
            if it.kind == kind and (it.task, it.variant) not in seen and (
                    kind == "fast" or it.task not in {p.task for p in picked}):
                picked.append(it)
    return picked[:count]


def cv_row(it: StreamItem, speedups: list[float], ref_us: list[float]) -> dict[str, Any]:
    cv = statistics.pstdev(speedups) / statistics.fmean(speedups) if (
        len(speedups) >= 2 and statistics.fmean(speedups) > 0) else None
    return {"task": it.task, "variant": it.variant, "speedups": speedups, "cv": cv,
            "ref_time_us": statistics.median(ref_us) if ref_us else None}


def reward_cv(client: Any, stream: list[StreamItem], count: int, repeats: int, options: dict[str, Any],
              timeout_s: float) -> list[dict[str, Any]]:
    """``count`` candidates (pick_rescore), each scored ``repeats`` times afresh: the spread of their reward."""
    picked = pick_rescore(stream, count)
    ids: dict[str, int] = {}
    for k, it in enumerate(picked):
        for r in range(repeats):
            sid = client.submit(it.task_ref(), it.source + f"# rescore {r}\n", f"cv-{k}-{it.variant}-{r}",
                                options=item_options(it, options))
            ids[sid] = k
    speedups: dict[int, list[float]] = {}
    ref_us: dict[int, list[float]] = {}
    for res in client.results(timeout=timeout_s):
        k = ids[res.sample_id]
        if res.speedup is not None:
            speedups.setdefault(k, []).append(res.speedup)
        t = res.result.evidence.timing
        if t is not None and t.ref_time_us_median:
            ref_us.setdefault(k, []).append(t.ref_time_us_median)
    return [cv_row(it, speedups.get(k, []), ref_us.get(k, [])) for k, it in enumerate(picked)]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def throughput_figures(rows: list[dict[str, Any]], wall_s: float, slots: int | None) -> dict[str, Any]:
    """The figures the throughput target is stated in, over the rows that have them."""
    slot = [r["slot_s"] for r in rows if r.get("slot_s") is not None]
    work = [r["work_s"] for r in rows if r.get("work_s") is not None]
    over = [r["overhead_s"] for r in rows if r.get("overhead_s") is not None]
    slot_med, work_med = _median(slot), _median(work)
    return {
        "candidates_per_slot_hour": (round(len(rows) / (wall_s / 3600 * slots), 1)
                                     if wall_s > 0 and slots and rows else None),
        "slot_s_median": slot_med, "slot_s_p95": _pct(slot, 0.95),
        "work_s_median": work_med,
        "overhead_s_median": _median(over), "overhead_s_p95": _pct(over, 0.95),
        "slot_over_work": slot_med / work_med if slot_med is not None and work_med else None,
    }


def recheck_counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many results went through each re-check, and the seconds the evidence gives for them."""
    rv = [r for r in rows if r.get("reverified")]
    os_ran = [r for r in rows if r.get("other_sizes_ran")]
    os_s = [r["other_sizes_s"] for r in os_ran if r.get("other_sizes_s") is not None]
    statuses = dict(Counter(r["reverified"] for r in rv))
    rv_s = [r["reverify_s"] for r in rv if r.get("reverify_s") is not None]
    return {"reverified": len(rv), "reverified_status": statuses,
            "reverify_s_total": round(sum(rv_s), 3) if rv_s else None, "reverify_s_median": _median(rv_s),
            "other_sizes": len(os_ran),
            "other_sizes_failed": sum(1 for r in os_ran if r.get("other_sizes") == "failed"),
            "other_sizes_s_total": round(sum(os_s), 3) if os_s else None,
            "other_sizes_s_median": _median(os_s)}


def window_counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Task windows (``evidence.task_window``: a judge that served several candidates of a task):
    how many results came from one, how many had their task's set-up from an earlier candidate,
    and the set-up seconds that spared; and the correctness rounds whose reference call a kept output
    spared (evalfarm.judge.reference_memo), with the reason where no window kept any."""
    mine = [r["task_window"] for r in rows if r.get("task_window")]
    shared = [w for w in mine if w.get("shared_setup")]
    memos = [w.get("reference_memo") or {} for w in mine]
    return {"in_window": len(mine), "shared_setup": len(shared),
            "setup_spared_s": round(sum(float(w.get("setup_spared_s") or 0) for w in shared), 2),
            "reference_rounds_reused": sum(int(m.get("rounds_reused") or 0) for m in memos),
            "reference_memo_off": sorted({str(m["off"]) for m in memos if m.get("off")})}


def kind_figures(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind of candidate (fast, wrong, identical, slow): how many, their verdicts and medians."""
    out: dict[str, dict[str, Any]] = {}
    for kind in dict.fromkeys(r.get("kind", "") for r in rows):
        mine = [r for r in rows if r.get("kind", "") == kind]
        out[kind] = {"candidates": len(mine), "verdicts": dict(Counter(r["verdict"] for r in mine)),
                     **{f"{k}_median": _median([r[k] for r in mine if r.get(k) is not None])
                        for k in ("slot_s", "work_s", "overhead_s", "speedup")}}
    return out


def target_checks(fig: Mapping[str, Any], gpu_busy: float | None, cv: list[dict[str, Any]]) -> dict[str, Any]:
    """Each target (TARGETS) with its measured value and whether it is met (None: not measured)."""
    slot, work = fig.get("slot_s_median"), fig.get("work_s_median")
    bound = None if work is None else TARGETS["slot_work_factor"] * work + TARGETS["slot_fixed_s"]
    applies = [c for c in cv if c.get("cv") is not None and (c.get("ref_time_us") or 0) >= TARGETS["reward_cv_min_ref_us"]]
    worst = max((c["cv"] for c in applies), default=None)
    return {
        "slot": {"median_s": slot, "bound_s": bound, "met": None if slot is None or bound is None else slot <= bound},
        "gpu_busy": {"value": gpu_busy, "met": None if gpu_busy is None else gpu_busy >= TARGETS["gpu_busy_min"]},
        "reward_cv": {"rows": len(applies), "worst": worst,
                      "met": None if worst is None else worst <= TARGETS["reward_cv_max"]},
    }


def summarise(rows: list[dict[str, Any]], wall_s: float, sampler: Sampler, cv: list[dict[str, Any]],
              device: str) -> dict[str, Any]:
    lat = [r["latency_s"] for r in rows]
    evals = [r["phases_s"].get("total", sum(r["phases_s"].values())) for r in rows if r["phases_s"]]
    phases: dict[str, float] = {}
    for name in sorted({k for r in rows for k in r["phases_s"]}):
        vals = [r["phases_s"][name] for r in rows if name in r["phases_s"]]
        phases[name] = statistics.median(vals)
    verdicts = dict(Counter(r["verdict"] for r in rows))
    gpu_busy = round(statistics.fmean(sampler.util) / 100, 3) if sampler.util else None
    fig = throughput_figures(rows, wall_s, sampler.slots)
    return {
        "device": device, "candidates": len(rows), "wall_s": round(wall_s, 1),
        "candidates_per_minute": round(60 * len(rows) / wall_s, 2) if wall_s > 0 else None,
        **fig,
        "latency_s_median": _pct(lat, 0.5), "latency_s_p95": _pct(lat, 0.95),
        "evaluation_s_median": _pct(evals, 0.5), "evaluation_s_p95": _pct(evals, 0.95),
        "phase_s_median": phases, "first_build_s_total": round(sum(r["build_s"] for r in rows), 1),
        "verdicts": verdicts, "by_kind": kind_figures(rows), "rechecks": recheck_counts(rows),
        "task_windows": window_counts(rows),
        "queue_depth_max": max((q for _, q, _ in sampler.queue), default=None),
        "queue_depth_samples": sampler.queue,
        "gpu_busy_fraction": gpu_busy,
        "gpu_busy_fraction_per_gpu": [round(statistics.fmean(col) / 100, 3) for col in zip(*sampler.util_per_gpu,
                                                                                        strict=True)],
        "slots": sampler.slots, "gpu_model": sampler.gpu_model,
        "candidates_per_minute_per_slot": (round(60 * len(rows) / wall_s / sampler.slots, 2)
                                           if wall_s > 0 and sampler.slots else None),
        "reward_cv": cv,
        "targets": target_checks(fig, gpu_busy, cv),
    }


def _met(flag: bool | None) -> str:
    return "not measured" if flag is None else "met" if flag else "NOT met"


def target_line(s: Mapping[str, Any]) -> str:
    """The targets beside the measured values, in one line."""
    t = s["targets"]
    slot, work = t["slot"], s.get("work_s_median")
    f = TARGETS
    slot_txt = ("-" if slot["median_s"] is None or slot["bound_s"] is None else
                f"{slot['median_s']:.2f} s against {f['slot_work_factor']} x {work:.2f} + {f['slot_fixed_s']} = "
                f"{slot['bound_s']:.2f} s")
    busy = t["gpu_busy"]["value"]
    cv = t["reward_cv"]
    cv_txt = (f"no CV row with a reference of {f['reward_cv_min_ref_us']:.0f} us or more" if cv["worst"] is None
              else f"worst {cv['worst']:.2%} over {cv['rows']} row(s)")
    return (f"Targets: median slot <= {f['slot_work_factor']} x protocol work + {f['slot_fixed_s']} s: {slot_txt}, "
            f"{_met(slot['met'])}; GPU busy >= {f['gpu_busy_min']:.0%}: "
            f"{'-' if busy is None else format(busy, '.0%')}, {_met(t['gpu_busy']['met'])}; reward CV <= "
            f"{f['reward_cv_max']:.1%} for kernels of {f['reward_cv_min_ref_us']:.0f} us or more: {cv_txt}, "
            f"{_met(cv['met'])}.")


def markdown(s: dict[str, Any]) -> str:
    def f(x: Any, fmt: str = ".2f") -> str:
        return "-" if x is None else format(x, fmt)

    cut = ", interrupted: the candidates that finished" if s.get("interrupted") else ""
    warm = s.get("warm_judges")
    warm_note = "" if warm is None else f", --warm-judges {warm}"
    if s.get("correctness_block") is False:
        warm_note += ", correctness blocks off"
    if s.get("warm_call") in ("on", "off"):
        warm_note += f", warm calls {s['warm_call']}"
    if s.get("standby_hold") in ("on", "off"):
        warm_note += f", standby hold {s['standby_hold']}"
    if s.get("other_sizes"):
        warm_note += ", other-size checks on"
    if s.get("tasks"):
        warm_note += f", tasks {','.join(s['tasks'])}"
    if s.get("serve_args"):
        warm_note += f", serve args {' '.join(s['serve_args'])}"
    gpu = str(s.get("device", "")).startswith("cuda")
    unit = "GPU-h" if gpu else "slot-h"
    # Lines 3-5 (the first table) and 9 (phases) stay where benchmarks/gpu_bench_sides.sh reads them.
    lines = [f"# Daemon benchmark ({s['device']}, {s['candidates']} candidates in {s['wall_s']} s{warm_note}{cut})", "",
             "| candidates/min | per slot | latency median s | latency p95 s | evaluation median s | "
             "evaluation p95 s | GPU busy | queue depth max |", "|---|---|---|---|---|---|---|---|",
             f"| {f(s['candidates_per_minute'])} | {f(s.get('candidates_per_minute_per_slot'))} | "
             f"{f(s['latency_s_median'])} | {f(s['latency_s_p95'])} | "
             f"{f(s['evaluation_s_median'])} | {f(s['evaluation_s_p95'])} | {f(s['gpu_busy_fraction'], '.0%')} | "
             f"{s['queue_depth_max']} |", "",
             f"Slots: {s.get('slots') if s.get('slots') is not None else 'unknown'}, device model the client "
             f"routes by: {s.get('gpu_model') or 'unknown (mixed or not reported)'}"
             + ("; GPU busy per GPU: " + ", ".join(f"{x:.0%}" for x in s["gpu_busy_fraction_per_gpu"])
                if s.get("gpu_busy_fraction_per_gpu") else ""), "",
             "Median seconds per phase: " + ", ".join(f"{k} {v:.2f}" for k, v in s["phase_s_median"].items()),
             f"First builds (not cached): {s['first_build_s_total']} s in all. Verdicts: "
             + ", ".join(f"{k} {v}" for k, v in sorted(s["verdicts"].items())), "",
             f"| candidates/{unit} | slot s median | slot s p95 | protocol work s median | overhead s median | "
             "overhead s p95 | slot / work | GPU busy |", "|---|---|---|---|---|---|---|---|",
             f"| {f(s.get('candidates_per_slot_hour'), '.1f')} | {f(s.get('slot_s_median'))} | "
             f"{f(s.get('slot_s_p95'))} | {f(s.get('work_s_median'), '.3f')} | {f(s.get('overhead_s_median'))} | "
             f"{f(s.get('overhead_s_p95'))} | {f(s.get('slot_over_work'), '.1f')} | "
             f"{f(s['gpu_busy_fraction'], '.0%')} |", ""]
    if "targets" in s:
        lines += [target_line(s), ""]
    rc = s.get("rechecks")
    if rc is not None:
        rv = ", ".join(f"{k} {v}" for k, v in sorted(rc["reverified_status"].items()))
        rv_s = rc.get("reverify_s_total")
        lines += [f"Re-checks: {rc['reverified']} re-verified{f' ({rv})' if rv else ''}"
                  + (f" ({rv_s:.2f} s in all, median {rc['reverify_s_median']:.2f} s)" if rv_s is not None else "")
                  + "; "
                  f"{rc['other_sizes']} checked at another size ({rc['other_sizes_failed']} failed"
                  + (f", {rc['other_sizes_s_total']:.2f} s in all, median {rc['other_sizes_s_median']:.2f} s"
                     if rc["other_sizes_s_total"] is not None else "") + ").", ""]
    tw = s.get("task_windows")
    if tw and tw["in_window"]:
        lines += [f"Task windows: {tw['in_window']} of {s['candidates']} candidates scored by a judge serving its "
                  f"task's window, {tw['shared_setup']} with the task's set-up from an earlier candidate "
                  f"({tw['setup_spared_s']:.2f} s of set-up spared in all); "
                  f"{tw.get('reference_rounds_reused', 0)} correctness rounds checked against kept reference outputs"
                  + (f" (none kept: {'; '.join(tw['reference_memo_off'])})" if tw.get("reference_memo_off")
                     and not tw.get("reference_rounds_reused") else "") + ".", ""]
    if s.get("by_kind"):
        lines += ["| kind | candidates | verdicts | slot s median | work s median | overhead s median | speedup median |",
                  "|---|---|---|---|---|---|---|"]
        for kind, k in s["by_kind"].items():
            lines.append(f"| {kind} | {k['candidates']} | "
                         + ", ".join(f"{v} {n}" for v, n in sorted(k["verdicts"].items()))
                         + f" | {f(k['slot_s_median'])} | {f(k['work_s_median'], '.3f')} | "
                         f"{f(k['overhead_s_median'])} | {f(k['speedup_median'])} |")
        lines.append("")
    lines += ["| reward CV: task | variant | reference us | speedups | CV |", "|---|---|---|---|---|"]
    for c in s["reward_cv"]:
        lines.append(f"| {c['task']} | {c['variant']} | {f(c.get('ref_time_us'), '.1f')} | "
                     f"{', '.join(f'{x:.2f}' for x in c['speedups'])} | {f(c['cv'], '.2%')} |")
    return "\n".join(lines) + "\n"


# Stream defaults per device: a GPU run is the throughput measurement, a CPU run a smoke test.
RUN_DEFAULTS = {"cuda": {"candidates": 200, "group": 8, "rescore": 5, "repeats": 5},
                "cpu": {"candidates": 24, "group": 4, "rescore": 2, "repeats": 3}}


def kernelbench_choice(device: str, root_arg: str | None, kb_arg: str | None,
                       tasks_named: bool) -> tuple[Path | None, list[str]]:
    """The KernelBench root and problems for the stream. ``root_arg`` None: the checkout next to
    the repository (DEFAULT_KERNELBENCH_ROOT) where it exists; "" or "none": none. ``kb_arg``
    None: the device's KB_TASKS_DEFAULT where there is a root, unless ``--tasks`` named built-in
    tasks (then none); "" or "none": none; else comma-separated problem files."""
    if root_arg is None:
        root = DEFAULT_KERNELBENCH_ROOT if DEFAULT_KERNELBENCH_ROOT.exists() else None
    else:
        root = None if root_arg.strip().lower() in ("", "none") else Path(root_arg)
    if kb_arg is None:
        names = [] if root is None or tasks_named else list(KB_TASKS_DEFAULT["cuda" if device.startswith("cuda")
                                                                                else "cpu"])
    else:
        names = [] if kb_arg.strip().lower() in ("", "none") else [t.strip() for t in kb_arg.split(",") if t.strip()]
    if names and root is None:
        raise SystemExit("--kb-tasks needs a KernelBench checkout: --kernelbench-root DIR "
                         f"(none given and {DEFAULT_KERNELBENCH_ROOT} does not exist)")
    return root, names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (a local daemon with every GPU, one slot each)")
    ap.add_argument("--endpoint", default="", help="an already running daemon instead of a local one")
    ap.add_argument("--candidates", type=int, default=None, help="candidates in the stream (default: 200 on cuda, 24 on cpu)")
    ap.add_argument("--group", type=int, default=None,
                    help="candidates per task in a row, G of an RL group (default: 8 on cuda, 4 on cpu)")
    ap.add_argument("--inputs", type=int, default=None, help="correctness inputs (default: 1000 on cuda, 20 on cpu)")
    ap.add_argument("--budget", type=float, default=None, help="timing budget s (default: 10 on cuda, 0.5 on cpu)")
    ap.add_argument("--rescore", type=int, default=None,
                    help="candidates re-scored for the reward CV, fast variants first, then identical copies "
                         "(0: none; default: 5 on cuda, 2 on cpu)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="times each of them is scored (default: 5 on cuda, 3 on cpu)")
    ap.add_argument("--sample-every", type=float, default=1.0, help="seconds between queue/GPU samples")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for any one result")
    ap.add_argument("--out", type=Path, default=Path("bench-daemon"), help="directory for the JSON and Markdown")
    ap.add_argument("--no-correctness-block", dest="correctness_block", action="store_false",
                    help="score every correctness round with its own exchange (ScoreConfig.correctness_block off)")
    ap.add_argument("--warm-judges", type=int, default=None,
                    help="the local daemon's --warm-judges (default: the daemon's own default)")
    ap.add_argument("--standby-hold", choices=("on", "off"), default=None,
                    help="the local daemon's --standby-hold (default: the daemon's own, on)")
    ap.add_argument("--tasks", default="",
                    help="comma-separated built-in task ids the stream cycles over, in order (e.g. L1/7,L1/8,L3/1; "
                         "'none': no built-in task; default: every built-in task with variants for the device)")
    ap.add_argument("--kernelbench-root", default=None, metavar="DIR",
                    help="a KernelBench checkout (holding KernelBench/level1/...), passed to the local daemon "
                         "(evalfarm serve --kernelbench-root) when KernelBench tasks are in the stream; 'none': "
                         f"no KernelBench tasks (default: {DEFAULT_KERNELBENCH_ROOT} where it exists)")
    ap.add_argument("--kb-tasks", default=None,
                    help="comma-separated KernelBench problem files under DIR/KernelBench, taking turns with the "
                         "built-in tasks (e.g. level1/19_ReLU.py,level2/6_Conv3d_Softmax_MaxPool_MaxPool.py; "
                         "'none': no KernelBench tasks; default with a root: KB_TASKS_DEFAULT, four short "
                         "level-1 and level-2 problems on cuda, the cheapest of them on cpu; none when --tasks "
                         "names built-in tasks)")
    ap.add_argument("--other-sizes", action="store_true",
                    help="ScoreConfig.check_other_sizes for the stream: each OK candidate is also checked for "
                         "correctness at another size (off, as in RL's requests)")
    ap.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                    help="appended to the local daemon's command line (repeatable; write it with '=': "
                         "--serve-arg=--task-window --serve-arg=8)")
    ap.add_argument("--warm-call", choices=("auto", "on", "off"), default="auto",
                    help="ScoreConfig.warm_call for the stream (auto: the farm's default, on for a CPU only)")
    ap.add_argument("--allow-weak-sandbox", action="store_true",
                    help="start the local daemon even where this host has no strong sandbox (it says so)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from evalfarm.client.sync import FarmClient

    gpu = args.device.startswith("cuda")
    for key, value in RUN_DEFAULTS["cuda" if gpu else "cpu"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.serve_arg and args.endpoint:
        raise SystemExit("--serve-arg sets the local daemon's flags: not with --endpoint")
    options = {"num_correctness_inputs": args.inputs or (1000 if gpu else 20),
               "timing_budget_s": args.budget or (10.0 if gpu else 0.5)}
    if not gpu:
        options["size_profile"] = "small"
    if not args.correctness_block:
        options["correctness_block"] = False
    if args.warm_call != "auto":
        options["warm_call"] = args.warm_call == "on"
    if args.other_sizes:
        options["check_other_sizes"] = True
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    builtin = tasks != ["none"]
    kb_root, kb_tasks = kernelbench_choice(args.device, args.kernelbench_root, args.kb_tasks,
                                           tasks_named=bool(tasks) and builtin)
    stream = build_stream("cuda" if gpu else "cpu", args.candidates, args.group,
                          (tasks or None) if builtin else None, kb_root, kb_tasks, builtin=builtin)
    uses_kb = any(it.suite == "kernelbench" for it in stream)
    args.out.mkdir(parents=True, exist_ok=True)
    daemon = None
    rows: list[dict[str, Any]] = []
    cv: list[dict[str, Any]] = []
    interrupted = False
    signal.signal(signal.SIGTERM, _on_term)
    with tempfile.TemporaryDirectory(prefix="bench-daemon-") as tmp:
        try:
            if not args.endpoint:
                extra = ["--warm-judges", str(args.warm_judges)] if args.warm_judges is not None else []
                if args.standby_hold is not None:
                    extra += ["--standby-hold", args.standby_hold]
                if uses_kb and kb_root is not None:
                    extra += ["--kernelbench-root", str(kb_root.resolve())]
                extra += args.serve_arg
                try:
                    daemon = LocalDaemon(device="cuda" if gpu else "cpu", cache_dir=os.path.join(tmp, "cache"),
                                         log_path=args.out / "daemon.log", args=extra, start_timeout_s=180.0,
                                         allow_weak_sandbox=args.allow_weak_sandbox)
                except LocalDaemonError as err:
                    raise SystemExit(str(err)) from None
            client = FarmClient([args.endpoint or daemon.endpoint], default_deadline_s=args.timeout)
            sampler = Sampler(client, args.sample_every, gpu)
            t0 = time.monotonic()
            wall = 0.0
            try:
                sampler.start()
                run_stream(client, stream, options, args.timeout, rows)
                wall = time.monotonic() - t0
                sampler.stop()
                if args.rescore:
                    cv = reward_cv(client, stream, args.rescore, args.repeats, options, args.timeout)
            except (Interrupted, KeyboardInterrupt):
                interrupted = True
                wall = wall or time.monotonic() - t0
                log.warning("interrupted: reporting the %d candidate(s) that finished", len(rows))
            finally:
                sampler.stop()
                client.close(timeout=5.0)
        finally:
            if daemon is not None:
                daemon.stop()
    summary = summarise(rows, wall, sampler, cv, args.device)
    summary["interrupted"] = interrupted
    summary["warm_judges"] = args.warm_judges
    summary["correctness_block"] = args.correctness_block
    summary["warm_call"] = args.warm_call
    summary["standby_hold"] = args.standby_hold
    summary["other_sizes"] = args.other_sizes
    summary["serve_args"] = list(args.serve_arg)
    summary["kernelbench_root"] = str(kb_root) if uses_kb and kb_root is not None else None
    summary["kb_tasks"] = list(dict.fromkeys(it.task for it in stream if it.suite == "kernelbench"))
    summary["options"] = options
    summary["tasks"] = list(dict.fromkeys(it.task for it in stream))  # in stream order
    (args.out / "bench_daemon.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    text = markdown(summary)
    (args.out / "bench_daemon.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
