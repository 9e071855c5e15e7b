"""Every attack file under tests/adversarial/runtime and tests/adversarial/gpu is scored by the
attack sweep (scripts/attack_sweep.py), or named there as checked by its own test: a new attack
cannot be left out of the sweep's "paid" count by forgetting to list it."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _sweep_module():
    spec = importlib.util.spec_from_file_location("attack_sweep", ROOT / "scripts" / "attack_sweep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_attack_file_is_swept_or_named_as_checked_elsewhere():
    sweep = _sweep_module()
    adv = ROOT / "tests" / "adversarial"
    files = {str(f.relative_to(adv)) for d in ("runtime", "gpu") for f in (adv / d).glob("*.py")}
    tasks = {f for f in files if Path(f).name.startswith("task_")}
    listed = {a.file for a in sweep.ATTACKS} | set(sweep.HONEST_TWINS.values()) | set(sweep.CHECKED_ELSEWHERE)
    assert files - tasks - listed == set(), "attack files neither swept nor named in CHECKED_ELSEWHERE"
    assert listed - files == set(), "the sweep names attack files that do not exist"
    for test_file in sweep.CHECKED_ELSEWHERE.values():
        assert (ROOT / test_file).is_file(), test_file
    for a in sweep.ATTACKS:
        assert (ROOT / "tests" / a.task).is_file(), a.task
