"""An operator's diagnostic: every worker exchange of an evaluation, step by step.

With ``EVALFARM_ROUND_TRACE=DIR`` set in the daemon's (or ``evalfarm score``'s) environment, each
judge writes ``DIR/rounds-<pid>.jsonl`` when its evaluation ends: one line per exchange with a
worker, in order. A line holds the judge's own clock for each step of the exchange (``at_us``: when
it began, from the first exchange; ``warm_us``: prepare sent to "warmed" read, where the judge
asked for an untimed warm call; ``prepare_us``: then to "prepared" read, where the exchange began
with a "prepare"; ``stop_us``, ``judge_quiet_us`` (the judge's own quiet-GPU wait before a reference
call prepared ahead), ``write_us`` (inputs written and synchronised), ``resume_us``;
``go_us``: go sent to the reply read (with the go queued first, judge.GO_FIRST_ENV, the SIGCONT
after it is in here, and ``resume_us`` is the step's start only); ``ahead_us``: then to the next call's "prepared" read, where
the worker prepares ahead; ``final_stop_us``), the worker's own report of its parts (``poison_us``,
``quiet_us``, ``ahead_poison_us``, and per call ``pre_us`` (flush and synchronisation), ``call_us``,
``event_us``, ``post_us`` (output checks and copy); in a correctness block ``prep_us``, the
preparation before each call, 0 for the first), and what the exchange was (``role``, ``rounds``, ``block``,
``counted``: whether its times could be timing samples; on a GPU with NVML, ``sm_mhz`` and
``clock_reasons``, the SM clock and NVML's clock-event reasons read before the batch of rounds;
``wrote``: whose inputs the judge wrote in
it, where not just this worker's). Nothing is written during the rounds: the
lines are kept in memory and written once, after the verdict.

``python scripts/round_trace_summary.py DIR`` prints the medians per step and role, and the
spread of the paired rounds' speedups. A diagnostic only: nothing here feeds a score.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

ROUND_TRACE_ENV = "EVALFARM_ROUND_TRACE"
# The steps the judge's clock measures, in order: together, one whole exchange.
JUDGE_STEPS = ("warm_us", "prepare_us", "stop_us", "judge_quiet_us", "write_us", "resume_us", "go_us", "ahead_us",
               "final_stop_us")


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 1)


class RoundTrace:
    """The exchanges of one evaluation, kept in memory and written by ``write``."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.lines: list[dict[str, Any]] = []
        self._origin: float | None = None
        self.counted = True  # set by the judge: whether the rounds now run can be timing samples
        # On a GPU, the judge's NVML reader (devices.nvml_clock_reader), read once per batch of rounds
        # (sample_clock) and written into the batch's lines: the SM clock, and why it is not higher.
        self.clock_reader: Callable[[], dict[str, int]] | None = None
        self._clock: dict[str, int] = {}

    @classmethod
    def from_env(cls) -> RoundTrace | None:
        out_dir = os.environ.get(ROUND_TRACE_ENV, "")
        return cls(out_dir) if out_dir else None

    def sample_clock(self) -> None:
        """The device's clock now, for the lines of the exchanges that follow (between rounds only)."""
        if self.clock_reader is not None:
            self._clock = self.clock_reader()

    def exchange(self, role: str, rounds: list[int], stamps: dict[str, float], prepared: dict[str, Any],
                 reply: dict[str, Any], ahead: dict[str, Any] | None = None,
                 wrote: tuple[str, ...] | None = None) -> None:
        """One exchange: ``stamps`` are the judge's ``time.perf_counter()`` readings (``start``,
        ``warmed`` (only with a warm call), ``prepared`` (only with a "prepare" of its own),
        ``stopped``, ``quiet`` (the judge's own quiet-GPU wait, before a reference call prepared ahead),
        ``written``, ``resumed``, ``replied``, ``ahead`` (the next call prepared
        after the reply), ``final_stop``); ``prepared``, ``reply`` and ``ahead`` the worker's
        messages; ``wrote``: whose inputs the judge wrote in it, where not just this worker's
        (judge.ROUND_WRITE_ENV)."""
        start = stamps["start"]
        if self._origin is None:
            self._origin = start
        line: dict[str, Any] = {
            "role": role, "rounds": rounds, "block": reply.get("op") == "block", "counted": self.counted,
            "at_us": _us(start - self._origin), **self._clock,
        }
        def last(*names: str) -> str:  # the latest of these steps that happened
            return next((n for n in reversed(names) if n in stamps), names[0])

        steps = (("warm_us", "start", "warmed"), ("prepare_us", last("start", "warmed"), "prepared"),
                 ("stop_us", "prepared", "stopped"), ("judge_quiet_us", "stopped", "quiet"),
                 ("write_us", last("stopped", "quiet"), "written"), ("resume_us", "written", "resumed"),
                 ("go_us", "resumed", "replied"), ("ahead_us", "replied", "ahead"),
                 ("final_stop_us", last("replied", "ahead"), "final_stop"))
        assert tuple(key for key, _, _ in steps) == JUDGE_STEPS
        for key, a, b in steps:
            if a in stamps and b in stamps:
                line[key] = _us(stamps[b] - stamps[a])
        for key, field in (("poison_us", "poison_s"), ("quiet_us", "quiet_wait_s")):
            if isinstance(prepared.get(field), float):
                line[key] = _us(prepared[field])
        if ahead and isinstance(ahead.get("poison_s"), float):
            line["ahead_poison_us"] = _us(ahead["poison_s"])
        calls = reply.get("rounds") if reply.get("op") == "block" else [reply]
        parts: dict[str, list[float]] = {"pre_us": [], "call_us": [], "event_us": [], "post_us": [], "prep_us": []}
        for call in calls or []:
            if not isinstance(call, dict):
                continue
            for key, field, scale in (("pre_us", "pre", 1e-3), ("call_us", "t", 1e-3), ("event_us", "e", 1.0),
                                      ("post_us", "post", 1e-3), ("prep_us", "prep", 1e-3)):
                value = call.get(field)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    parts[key].append(round(float(value) * scale, 1))
        for key, values in parts.items():
            if values:
                line[key] = values if len(values) > 1 else values[0]
        # Outputs the worker copied in a dense layout of their own (column-major, channels-last):
        # the strides it reported, per call (None for row-major outputs).
        strides = [call.get("strides") for call in calls or [] if isinstance(call, dict)]
        if any(any(s) for s in strides if isinstance(s, list)):
            line["strides"] = strides if len(strides) > 1 else strides[0]
        if wrote is not None and wrote != (role,):
            line["wrote"] = list(wrote)
        if reply.get("op") not in ("round", "block"):
            line["reply"] = str(reply.get("op"))
        self.lines.append(line)

    def timed_block(self, role: str, results: list[dict[str, Any]]) -> None:
        """One timed block (evalfarm.judge.timed_blocks): per call, the time the worker reported
        (``call_us``), its gate-to-call part (``pre_us``) and its time on the judge's clock
        (``judge_us``: gate opened to completion seen, plus a share of the block's tail)."""
        line: dict[str, Any] = {"role": role, "rounds": [int(x["r"]) for x in results], "block": True,
                                "timed": True, "counted": self.counted, **self._clock}
        for key, field, scale in (("call_us", "t", 1e-3), ("pre_us", "pre", 1e-3), ("judge_us", "j", 1e-3)):
            line[key] = [round(float(x[field]) * scale, 1) for x in results]
        strides = [x.get("strides") for x in results]
        if any(any(s) for s in strides if isinstance(s, list)):
            line["strides"] = strides
        self.lines.append(line)

    def write(self) -> str:
        """Write the lines; returns the file's path ("" when it could not be written)."""
        path = os.path.join(self.out_dir, f"rounds-{os.getpid()}.jsonl")
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(line, separators=(",", ":")) + "\n" for line in self.lines)
        except OSError as err:
            log.warning("round trace not written to %s: %s", self.out_dir, err)
            return ""
        return path
