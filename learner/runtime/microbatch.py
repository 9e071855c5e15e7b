"""Micro-batches: one global batch split into `n` slices that each step over every device.

A batch's rows are laid out over the mesh's batch axes in contiguous blocks (device d holds rows
[d * B/N, (d+1) * B/N)). Micro-batch i takes rows i, i + n, i + 2n, ...: every device then holds
B/(N n) rows of every micro-batch, so splitting moves no data between devices and each
micro-batch is as parallel as the whole batch. Losses are sums with counts, so accumulating
(loss_sum, count) and summed gradients over the micro-batches and dividing once at the end gives
exactly the full-batch step (up to float summation order).
"""

from __future__ import annotations

import math
from typing import Any

import jax

from learner.lm.sharding import constrain


class MicroBatchError(ValueError):
    """The batch cannot be split as configured."""


def micro_batch_count(rows: int, seq_len: int, tokens_per_micro_batch: int | None,
                      row_multiple: int = 1) -> int:
    """How many micro-batches keep each at most `tokens_per_micro_batch` tokens (0/None: one).

    The count divides `rows` and leaves every micro-batch a multiple of `row_multiple` rows (the
    mesh's batch shards) when the batch allows it; otherwise the next count that divides `rows`.
    """
    if not tokens_per_micro_batch or tokens_per_micro_batch <= 0:
        return 1
    if seq_len > tokens_per_micro_batch:
        raise MicroBatchError(
            f"one row of {seq_len} tokens exceeds train.micro_batch_tokens={tokens_per_micro_batch}; "
            "raise train.micro_batch_tokens or lower max_seq_len")
    want = max(1, math.ceil(rows * seq_len / tokens_per_micro_batch))
    divisors = [n for n in range(want, rows + 1) if rows % n == 0]
    for n in divisors:
        if (rows // n) % row_multiple == 0:
            return n
    return divisors[0]


def split_micro_batches(batch: dict[str, Any], n: int) -> dict[str, Any]:
    """[B, ...] leaves -> [n, B/n, ...] with micro-batch i = rows i, i+n, ... (see module doc)."""

    def one(x: jax.Array) -> jax.Array:
        b = x.shape[0]
        if b % n:
            raise MicroBatchError(f"{b} rows do not split into {n} micro-batches")
        y = x.reshape(b // n, n, *x.shape[1:]).swapaxes(0, 1)
        return constrain(y, "micro")

    return jax.tree.map(one, batch)


def merge_micro_batches(x: jax.Array) -> jax.Array:
    """Inverse of `split_micro_batches` for one array: [n, B/n, ...] -> [B, ...]."""
    n, m = x.shape[:2]
    return x.swapaxes(0, 1).reshape(n * m, *x.shape[2:])
