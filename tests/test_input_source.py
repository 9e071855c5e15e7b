"""The judge's round inputs: secret-seeded, reproducible by the judge alone, and cheap to draw."""

from __future__ import annotations

import random
import traceback
import types

import numpy as np
import pytest
import torch

from evalfarm.judge.inputs import InputSource

TASK = '''
import random
import numpy as np
import torch

def get_init_inputs():
    return [int(torch.randint(1, 1000, (1,))), float(np.random.rand()), random.random()]

def get_inputs():
    return [torch.randn(8, 5), torch.rand(3), torch.randint(0, 100, (6,)),
            float(np.random.rand()), random.random(), 7]
'''


def _task() -> types.ModuleType:
    mod = types.ModuleType("task_for_inputs")
    exec(TASK, mod.__dict__)  # noqa: S102 - a test task of our own
    return mod


def _equal(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b, strict=True))


def _full_reseed_draw(source: InputSource, index: int, device: str) -> list:
    """What the round's values are under a full ``torch.manual_seed`` of every backend."""
    seed = source.seed_for("inputs", index)
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    with torch.device(device):
        return list(source.module.get_inputs())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_init_and_round_inputs_are_those_of_a_full_reseed(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")
    source = InputSource(_task(), device, secret=b"k" * 32)
    seed = source.seed_for("init", 0)
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    expected = list(source.module.get_init_inputs())
    assert source.init_inputs() == expected
    for index in (0, 1, 17, -1):
        drawn = source.inputs(index)
        assert drawn[0].device.type == device
        assert _equal(drawn, _full_reseed_draw(source, index, device)), index


def test_round_inputs_repeat_per_round_and_secret() -> None:
    a = InputSource(_task(), "cpu", secret=b"a" * 32)
    b = InputSource(_task(), "cpu", secret=b"b" * 32)
    assert _equal(a.inputs(3), a.inputs(3))
    assert not torch.equal(a.inputs(3)[0], a.inputs(4)[0])
    assert not torch.equal(a.inputs(3)[0], b.inputs(3)[0])


def test_drawing_a_round_formats_no_stack_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch.manual_seed queues a seed call with a formatted stack for every backend that is not
    # initialised (CUDA on a CPU host, XPU, MTIA): about 0.6 ms per round, paid per round before.
    calls = []
    real = traceback.format_stack
    monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: calls.append(1) or real(*a, **k))
    source = InputSource(_task(), "cpu", secret=b"s" * 32)
    for index in range(5):
        source.inputs(index)
    assert calls == []
