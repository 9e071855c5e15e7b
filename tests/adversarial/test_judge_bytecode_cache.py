"""A candidate that tries to plant bytecode in the judges' cache (evalfarm.judge.bytecode).

Bytecode there runs in the next judge. The candidate looks for the cache where a worker could
learn of it (its PYTHONPYCACHEPREFIX, the farm's default place under the daemon user's home, the
path the test writes into its source) and tries to add a file and to overwrite every bytecode
file it finds; then it computes the right answer. Asserted: nothing in the cache changed and
nothing was added there by the attack, and the next evaluation's judge still scores honestly.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge import bytecode
from evalfarm.scoring import as_candidate, as_task, score
from evalfarm.tasks.format import parse_candidate

QUICK = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.3, min_timed_rounds=7, warmup_rounds=1,
                    check_other_sizes=False)

ATTACK = '''
import os
import torch
import torch.nn as nn

KNOWN = {known!r}
n = 8192
scale = 1.5


def _plant():
    places = [os.environ.get("PYTHONPYCACHEPREFIX", ""), KNOWN,
              os.path.expanduser("~/.cache/evalfarm/judge-bytecode"), "/root/.cache/evalfarm/judge-bytecode"]
    for place in [p for p in places if p]:
        try:
            os.makedirs(place, exist_ok=True)
            with open(os.path.join(place, "planted.txt"), "w") as f:
                f.write("planted")
        except OSError:
            pass
        for root, _dirs, files in os.walk(place):
            for name in files:
                if name.endswith(".pyc"):
                    try:
                        with open(os.path.join(root, name), "r+b") as f:
                            f.seek(16)
                            f.write(b"planted")
                    except OSError:
                        pass


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(n))
        _plant()

    def forward(self, x):
        _plant()
        return torch.relu(x) * self.scale + self.bias
'''


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file()}


def test_a_candidate_cannot_plant_bytecode_for_the_next_judge(data_dir, build_pool, tmp_path, monkeypatch):
    if not bytecode.candidates_cannot_write("cpu")[0]:
        pytest.skip("candidates could write a cache here (no bubblewrap, the daemon's uid): judges use none")
    cache = tmp_path / "judge-bytecode"
    monkeypatch.setattr(bytecode, "cache_dir", lambda: cache)
    monkeypatch.setenv(bytecode.SWITCH_ENV, "on")
    bytecode._decide.cache_clear()
    task = as_task(str(data_dir / "task_scale.py"))
    try:
        first = score(task, as_candidate(str(data_dir / "cand_same.py")), QUICK, build_pool=build_pool)
        assert first.verdict is Verdict.OK, first.detail
        before = _digests(cache)
        assert before, "the first judge filled the cache"
        attack = parse_candidate(ATTACK.format(known=str(cache)), "plant_bytecode")
        score(task, attack, QUICK, build_pool=build_pool)  # its verdict is not the point: the cache is
        after = _digests(cache)
        changed = [name for name, digest in before.items() if after.get(name) != digest]
        assert not changed, f"the candidate changed the judges' bytecode: {changed[:5]}"
        assert not [name for name in after if "planted" in name], "the candidate added a file to the cache"
        again = score(task, as_candidate(str(data_dir / "cand_same.py")), QUICK, build_pool=build_pool)
        assert again.verdict is Verdict.OK, again.detail
    finally:
        bytecode._decide.cache_clear()
