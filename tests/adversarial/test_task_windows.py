"""Task windows (evalfarm.judge.task_window): nothing of one candidate helps the next candidate of
the same task in the same judge. Part 1 leaves (input hash, output) pairs everywhere it can write,
part 2 looks for them: it must not be paid, in the strong sandbox (nothing crosses, and the correctness
blocks' inputs are the window's, the same for both: evalfarm.judge.reference_memo) and in the
built-in one (files in the host's /tmp cross, but every candidate draws inputs of its own)."""

from __future__ import annotations

import dataclasses
import glob
import os
import re
from pathlib import Path

import pytest
import torch

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.standby import WarmJudges
from evalfarm.judge.task_window import WindowSpec
from evalfarm.scoring import as_candidate, as_task, score

ADV = Path(__file__).resolve().parent
QUICK = ScoreConfig(num_correctness_inputs=20, timing_budget_s=0.3, min_timed_rounds=21)


def _clean_pairs() -> None:
    for place in ("/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~")):
        for path in glob.glob(os.path.join(place, "evalfarm-pair-*.pt")):
            try:
                os.unlink(path)
            except OSError:
                pass


@pytest.mark.parametrize("device, sandbox", [
    ("cpu", "builtin"), ("cpu", "auto"),
    pytest.param("cuda", "auto", marks=[pytest.mark.gpu, pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU")]),
])
def test_pairs_left_by_a_candidate_do_not_pay_the_next_one_of_its_window(device, sandbox, data_dir, build_pool,
                                                                         monkeypatch):
    monkeypatch.setenv("EVALFARM_SANDBOX", sandbox)
    task = as_task(str(data_dir / "task_scale.py"))
    judges = WarmJudges({}, window=WindowSpec(4, 30.0))
    config = dataclasses.replace(QUICK, device=device)
    _clean_pairs()
    try:
        leaver = score(task, as_candidate(str(ADV / "runtime" / "window_leave_pairs.py")), config, build_pool,
                       judges=judges)
        assert leaver.verdict is Verdict.OK, leaver.detail
        assert leaver.evidence.task_window["index"] == 1
        finder = score(task, as_candidate(str(ADV / "runtime" / "window_find_pairs.py")), config, build_pool,
                       judges=judges)
    finally:
        judges.close()
        _clean_pairs()
    # The finder ran in the same judge as the leaver, after it (the window is what is tested) ...
    assert finder.evidence.task_window.get("index") == 2 and finder.evidence.task_window["shared_setup"], \
        finder.evidence.task_window
    # ... and was not paid: it never found a stored output for its own inputs, after 40 calls.
    assert finder.verdict is not Verdict.OK, finder.detail
    assert finder.speedup is None
    assert "found a stored output" not in finder.detail, finder.detail
    seen = re.search(r"window pairs seen: (\d+), matching these inputs: 0", finder.detail)
    assert seen is not None, finder.detail
    memo = finder.evidence.task_window["reference_memo"]
    if sandbox == "auto" and "off" not in memo:
        # The strong sandbox: the correctness blocks' inputs were the leaver's own (the window's
        # secret, evalfarm.judge.reference_memo), so its pairs would have matched had any crossed.
        assert memo["rounds_reused"] > 0, memo
    if sandbox == "builtin":
        assert "not in bubblewrap" in memo["off"], memo
        # The host's /tmp crosses from one worker to the next in the built-in sandbox: the pairs
        # were there to be found, and only the fresh inputs made them useless.
        assert int(seen.group(1)) > 0, finder.detail
