"""The `evalfarm score` flags that set scoring options: defined, documented and mapped here only.

Local scoring, a single remote score and a remote batch all read the command line through
``option_changes``, so a flag means the same wherever the candidate is scored. Help texts take
their defaults from ``ScoreConfig`` itself, so what ``--help`` says is what a score uses.
"""

from __future__ import annotations

import argparse
from typing import Any

from evalfarm.config import ScoreConfig

_DEFAULT = ScoreConfig()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The scoring-option flags of `evalfarm score` (each defaults to None: "not given")."""
    d = _DEFAULT
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (with --server the daemon picks its GPU)")
    p.add_argument("--inputs", type=int, default=None, metavar="N",
                   help=f"correctness inputs, each checked against the reference (default: {d.num_correctness_inputs})")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help=f"timing budget: measuring stops when the 95%% CI is within +/-{d.target_ci * 100:g}%% or after "
                        f"this long (default: {d.timing_budget_s:g})")
    p.add_argument("--tolerance", choices=["strict", "kernelbench"], default=None,
                   help="how close outputs must be: strict (dtype- and scale-aware) or kernelbench "
                        f"(torch.allclose, atol=rtol=1e-2, KernelBench's check) (default: {d.tolerance})")
    p.add_argument("--guard-policy", choices=["honest", "paper", "strict", "permissive"], default=None,
                   help="which static findings decide the verdict alone; paper = KernelBench's rules "
                        f"(default: {d.guard_policy})")
    p.add_argument("--size-profile", default=None, metavar="PROFILE",
                   help="the task's size profile: default, small or one the task defines; auto = small on a CPU "
                        f"where the task has it (default: {d.size_profile})")
    p.add_argument("--other-sizes", action=argparse.BooleanOptionalAction, default=True,
                   help="after an OK verdict, re-check correctness at one other size profile of the task and "
                        "report it as evidence.other_sizes (docs/tasks.md, \"Unseen sizes\") (default: on)")
    p.add_argument("--require-other-sizes", action="store_true",
                   help="a failure at the other size profile makes the verdict INCORRECT (default: off)")
    p.add_argument("--reverify-above", type=float, default=None, metavar="SPEEDUP",
                   help="an OK score above this is measured again with fresh workers and new inputs and kept only if the two agree "
                        f"within 10%%; 0 skips it (default: {d.reverify_above:g})")
    p.add_argument("--charge-exchange", choices=["auto", "on", "off"], nargs="?", const="on", default="auto",
                   help="add to every candidate call the time the judge's own clock saw beyond the calls the "
                        "candidate's process reported, over the reference's (always reported as "
                        "timing.exchange_excess_us); auto: on a GPU only; on: also on a CPU, for a quiet host "
                        "(docs/security.md) (default: auto)")
    p.add_argument("--gpu-lease-timeout", type=float, default=None, metavar="SECONDS",
                   help="how long to wait while another evaluation on this host holds the GPU, then INFRA_ERROR; "
                        f"not charged to the candidate (default: {d.gpu_lease_timeout_s:g})")
    p.add_argument("--correctness-block", action=argparse.BooleanOptionalAction, default=None,
                   help="run the correctness rounds after the warm-up a batch per worker exchange, their inputs "
                        "all written before the batch and their times never counted; --no-correctness-block: "
                        f"one exchange per call (docs/security.md) (default: {'on' if d.correctness_block else 'off'})")
    p.add_argument("--precision", choices=["fp64", "tolerance"], default=None,
                   help="fp64: on a few correctness rounds (some with widened, signed inputs) the candidate's error "
                        "against a float64 ground truth may be at most k times the reference's (2x, 3x for half "
                        "types) plus a small floor, else INCORRECT; tolerance: the tolerance check alone (as "
                        "--guard-policy paper does) (docs/security.md, \"The precision gate\") "
                        f"(default: {d.precision})")
    p.add_argument("--timing-protocol", choices=["blocks", "lone"], default=None,
                   help="blocks: each worker's timed calls queued back to back, each call's fresh inputs released "
                        "right before it; lone: one call per exchange with the judge (the earlier protocol) "
                        f"(default: {d.timing_protocol})")
    p.add_argument("--warm-call", choices=["auto", "on", "off"], nargs="?", const="on", default="auto",
                   help="before each short timed call (reference under 1 ms), call the model once, untimed, on "
                        "inputs the worker has already seen, in both workers; auto: on a CPU only "
                        "(docs/security.md, \"Warm calls\") (default: auto)")


def option_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The ScoreConfig fields the command line sets (the device aside): what a daemon is sent,
    and what a local score applies over ScoreConfig's defaults."""
    changes: dict[str, Any] = {}
    for dest, field in (("inputs", "num_correctness_inputs"), ("budget", "timing_budget_s"),
                        ("tolerance", "tolerance"), ("size_profile", "size_profile"),
                        ("guard_policy", "guard_policy"), ("reverify_above", "reverify_above"),
                        ("gpu_lease_timeout", "gpu_lease_timeout_s"), ("correctness_block", "correctness_block"),
                        ("precision", "precision"), ("timing_protocol", "timing_protocol")):
        value = getattr(args, dest, None)
        if value is not None:
            changes[field] = value
    # `evalfarm score` checks other sizes unless told not to (ScoreConfig's own default is off).
    changes["check_other_sizes"] = bool(getattr(args, "other_sizes", True))
    changes["require_other_sizes"] = bool(getattr(args, "require_other_sizes", False))
    for dest, field in (("charge_exchange", "charge_exchange"), ("warm_call", "warm_call")):
        value = getattr(args, dest, "auto")
        if value not in (None, "auto"):
            changes[field] = value == "on"
    return changes


def local_config(args: argparse.Namespace) -> ScoreConfig:
    """The ScoreConfig of a local score (ConfigError for a value out of range)."""
    return ScoreConfig(device=args.device, **option_changes(args))


def remote_identity(args: argparse.Namespace) -> dict[str, Any]:
    """The options of a score on farm daemons as a full ScoreConfig dict, for comparing runs; its
    device is "farm" (the daemon picks it)."""
    return {**ScoreConfig(**option_changes(args)).to_dict(), "device": "farm"}
