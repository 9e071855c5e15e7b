"""What keeping a task's reference outputs for its correctness inputs would take (issue: reference
work shared within a task): per built-in task at a size profile, from shapes alone (PyTorch's meta
device, nothing allocated), one round's input and output bytes, and the outputs of N rounds.

    python benchmarks/probes/reference_share_budget.py [--profile default] [--rounds 1000] [--budget-gib 8]

A holder of (task, seed) -> reference outputs needs rounds x output bytes of memory the
candidates' processes cannot reach; the last column says whether that fits the budget.
"""

from __future__ import annotations

import argparse

from evalfarm.judge.memory_plan import meta_footprint
from evalfarm.tasks.format import instantiate_task
from evalfarm.tasks.suite import builtin_suite


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--budget-gib", type=float, default=8.0)
    args = ap.parse_args(argv)
    budget = args.budget_gib * (1 << 30)
    suite = builtin_suite()
    print(f"| task | input MiB | output MiB | {args.rounds} outputs GiB | fits {args.budget_gib:g} GiB |")
    print("|---|---:|---:|---:|---|")
    fitting = 0
    for entry in suite.entries:
        task = suite.load(entry.task_id)
        module = instantiate_task(task, args.profile)
        fp = meta_footprint(module, list(module.get_init_inputs()))
        if fp is None:
            print(f"| {entry.task_id} {entry.name} | - | - | - | no shape-only estimate |")
            continue
        total = args.rounds * fp.output_bytes
        fitting += total <= budget
        print(f"| {entry.task_id} {entry.name} | {fp.input_bytes / (1 << 20):.1f} | {fp.output_bytes / (1 << 20):.2f} | "
              f"{total / (1 << 30):.2f} | {'yes' if total <= budget else 'no'} |")
    print(f"\n{fitting} of {len(suite.entries)} tasks fit at profile {args.profile!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
