"""A GPU shared with other work: evaluations on one GPU take turns (the host-wide GPU lease), and
work from outside the farm is the host's problem (INFRA_ERROR), not a verdict on the candidate.

Run on a CUDA host: ``pytest -m gpu tests/test_gpu_sharing.py -v``.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.scoring import as_candidate, as_task, score

pytestmark = pytest.mark.gpu

QUICK = ScoreConfig(device="cuda", num_correctness_inputs=20, timing_budget_s=1.0, min_timed_rounds=35,
                    reverify_above=0.0)

# Keeps the GPU busy from a process of its own, as another tenant would: 8192^2 matrix products,
# two batches in flight at all times, so the device never idles between them.
FOREIGN_LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda"); b = torch.randn_like(a)
torch.backends.cuda.matmul.allow_tf32 = False
torch.mm(a, b); torch.cuda.synchronize()
print("busy", flush=True)
end = time.monotonic() + float(sys.argv[1])
previous = None
while time.monotonic() < end:
    for _ in range(8):
        torch.mm(a, b)
    done = torch.cuda.Event(); done.record()
    if previous is not None:
        previous.synchronize()
    previous = done
"""


@pytest.fixture(scope="module")
def relu_task(data_dir):
    return as_task(str(data_dir / "gpu" / "task_relu.py"))


def test_two_evaluations_on_one_gpu_take_turns(relu_task, data_dir, build_pool):
    results = {}

    def run(name: str) -> None:
        results[name] = score(relu_task, as_candidate(str(data_dir / "gpu" / "cand_same.py")), QUICK,
                              build_pool=build_pool)

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert set(results) == {"a", "b"}
    for r in results.values():
        assert r.verdict is Verdict.OK, r.detail
        assert 0.8 <= r.speedup <= 1.25, r.evidence.timing  # neither timed the other's calls
        assert "gpu_lease_wait" in r.evidence.phases_s
    # One of them waited for the other's whole evaluation (its rounds take well over 0.5 s).
    assert max(r.evidence.phases_s["gpu_lease_wait"] for r in results.values()) > 0.5


@pytest.mark.exclusive  # its load would slow any other test's evaluation on the GPU
def test_work_from_outside_the_farm_is_infra_error_and_not_the_candidates_hack(relu_task, data_dir, build_pool):
    load = subprocess.Popen([sys.executable, "-c", FOREIGN_LOAD, "180"], stdout=subprocess.PIPE, text=True)
    try:
        assert load.stdout is not None and load.stdout.readline().strip() == "busy"
        r = score(relu_task, as_candidate(str(data_dir / "gpu" / "cand_same.py")), QUICK, build_pool=build_pool)
    finally:
        load.kill()
        load.wait(30)
    assert r.verdict is Verdict.INFRA_ERROR, (r.verdict, r.detail)
    assert "outside this evaluation" in r.detail, r.detail
    # The load is gone: the same candidate scores again, honestly.
    again = score(relu_task, as_candidate(str(data_dir / "gpu" / "cand_same.py")), QUICK, build_pool=build_pool)
    assert again.verdict is Verdict.OK, again.detail
