"""Command-line arguments the learner's benchmarks share."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (argparse reports anything else as a usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_steps_per_check(parser: argparse.ArgumentParser) -> None:
    """--steps-per-check: the rollout's decode steps between two checks of its loop condition."""
    parser.add_argument("--steps-per-check", type=positive_int, default=1,
                        help="decode steps between two checks of the loop's condition (sampling.steps_per_check)")
