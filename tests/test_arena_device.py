"""CUDA arenas open on the worker's own number of the GPU (evalfarm.judge.arena.cuda_handle_for).

The judge exports an arena under its numbering of the host's GPUs; the worker sees its one GPU as
cuda:0. These check the renumbering on the handle's argument tuple; tests/test_gpu.py scores a
candidate on a second GPU, where the real handles go through it."""

from __future__ import annotations

import pytest

from evalfarm.judge.arena import _REBUILD_DEVICE_ARG, cuda_handle_for


def _handle(index: int) -> dict:
    def rebuild(*args):
        return args

    args = ["Tensor", (4,), (1,), 0, "Storage", "uint8", index, b"ipc", 4, 0, False, b"ref", 0, b"event", True]
    assert args[_REBUILD_DEVICE_ARG] == index
    return {"kind": "cuda", "reduced": (rebuild, tuple(args)), "nbytes": 4, "device_index": index}


@pytest.mark.parametrize("judge_index", [0, 1, 7])
def test_the_worker_opens_the_arena_on_its_own_index(judge_index):
    import torch

    rebuild, args = cuda_handle_for(_handle(judge_index), torch.device("cuda:0"))
    assert args[_REBUILD_DEVICE_ARG] == 0
    # Everything else passes through unchanged.
    original = _handle(judge_index)["reduced"][1]
    assert [a for i, a in enumerate(args) if i != _REBUILD_DEVICE_ARG] == \
           [a for i, a in enumerate(original) if i != _REBUILD_DEVICE_ARG]
    assert cuda_handle_for(_handle(judge_index), 3)[1][_REBUILD_DEVICE_ARG] == 3


def test_no_device_or_an_old_handle_passes_through():
    h = _handle(1)
    assert cuda_handle_for(h, None)[1][_REBUILD_DEVICE_ARG] == 1
    old = {k: v for k, v in h.items() if k != "device_index"}
    assert cuda_handle_for(old, 0)[1][_REBUILD_DEVICE_ARG] == 1


def test_an_unexpected_argument_layout_is_refused_not_guessed():
    h = _handle(1)
    rebuild, args = h["reduced"]
    shifted = {**h, "reduced": (rebuild, ("extra", *args))}  # a torch that added an argument in front
    with pytest.raises(ValueError, match="cannot be renumbered"):
        cuda_handle_for(shifted, 0)
