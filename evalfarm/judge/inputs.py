"""Inputs drawn through the task's own get_inputs under a secret per-evaluation seed.

The seed for round r is derived from a 256-bit secret held only by the judge, so the
candidate can neither read nor reproduce it. Where the task allows, inputs are created
directly on the device (``with torch.device(dev)``), so 1000 inputs cost no host-to-device
copies; a task whose get_inputs cannot run that way falls back to host generation.

Some correctness rounds may be *widened* (``widen``, evalfarm.judge.precision): their draw of
the task's own inputs then gets random signs on the inputs the precision gate chose, from a seed
of their own, so the same round always draws the same widened inputs.

Some rounds may be *shared* (``share``, evalfarm.judge.reference_memo): their inputs (and their
widening's signs) are drawn under a task window's secret instead of this source's own, so every
candidate of the window gets the same inputs in those rounds.
"""

from __future__ import annotations

import hashlib
import random
import secrets
import types
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from evalfarm.judge import precision


class InputSource:
    def __init__(self, task_module: types.ModuleType, device: str, secret: bytes | None = None) -> None:
        self.module = task_module
        self.device = torch.device(device)
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self.on_device = self.device.type != "cpu"
        self._draw_generators: list[torch.Generator] | None = None
        self.widen_spec = precision.WidenSpec()
        self.widened_rounds: frozenset[int] = frozenset()
        self._shared_secret: bytes | None = None
        self.shared_rounds: range = range(0)

    def share(self, secret: bytes, rounds: range) -> None:
        """From now on, the inputs of ``rounds`` (and their widening) are drawn under ``secret``,
        a task window's (evalfarm.judge.reference_memo); every other draw keeps this source's own."""
        self._shared_secret = secret
        self.shared_rounds = rounds

    def widening(self, index: int) -> str:
        """What round ``index``'s inputs are widened by ("" where they are the task's own)."""
        return repr(self.widen_spec) if index in self.widened_rounds else ""

    def fresh(self) -> InputSource:
        """A source over the same task module with a new secret: inputs nobody has drawn yet
        (the next candidate of a task window, evalfarm.judge.task_window)."""
        return InputSource(self.module, str(self.device))

    def seed_for(self, purpose: str, index: int) -> int:
        shared = self._shared_secret is not None and purpose in ("inputs", "widen") and index in self.shared_rounds
        key = self._shared_secret if shared else self._secret
        assert key is not None
        h = hashlib.blake2b(f"{purpose}:{index}".encode(), key=key, digest_size=8)
        return int.from_bytes(h.digest(), "little") & ((1 << 63) - 1)

    def _generators(self) -> list[torch.Generator]:
        """The default generators a draw can use: the CPU's and this device's."""
        if self._draw_generators is None:
            gens = [torch.default_generator]
            if self.device.type == "cuda":
                torch.cuda.init()
                index = self.device.index if self.device.index is not None else torch.cuda.current_device()
                gens.append(torch.cuda.default_generators[index])
            self._draw_generators = gens
        return self._draw_generators

    def _seeded(self, seed: int) -> None:
        """Seed what a draw can use: the CPU's and this device's generators, ``random`` and numpy.
        Not ``torch.manual_seed``, which also seeds every other backend, and queues the call with a
        formatted stack trace for each one not initialised (XPU, MTIA; CUDA on a CPU host): about
        0.6 ms a round on a CPU host. The values drawn on this device and the CPU are the same."""
        for gen in self._generators():
            gen.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % (1 << 32))

    def init_inputs(self) -> list[Any]:
        self._seeded(self.seed_for("init", 0))
        return list(self.module.get_init_inputs())

    def weight_seed(self) -> int:
        return self.seed_for("weights", 0)

    def widen(self, spec: precision.WidenSpec, rounds: Iterable[int]) -> None:
        """From now on, the inputs of ``rounds`` are widened as ``spec`` says (none: no widening)."""
        self.widen_spec = spec
        self.widened_rounds = frozenset(rounds) if spec else frozenset()

    def inputs(self, index: int) -> list[Any]:
        """The inputs of round ``index``, on the device (widened for a widened round)."""
        values = self._drawn(index)
        if index in self.widened_rounds:
            values = precision.widen(values, self.widen_spec, self.seed_for("widen", index))
        return values

    def _drawn(self, index: int) -> list[Any]:
        seed = self.seed_for("inputs", index)
        if self.on_device:
            try:
                self._seeded(seed)
                with self.device:
                    values = list(self.module.get_inputs())
                return [self._to_device(v) for v in values]
            except Exception:  # noqa: BLE001 - task cannot generate on the device
                self.on_device = False
        self._seeded(seed)
        return [self._to_device(v) for v in self.module.get_inputs()]

    def _to_device(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(self.device)
        return value
