"""Task identity by content: a task reference carries its source's hash end to end, and a daemon
that would resolve a name to different content refuses it; the learner's local daemons resolve the
learner's own task set."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from evalfarm.tasks.suite import builtin_suite, kernelbench_suite
from evalfarm.v1 import evalfarm_pb2 as pb
from tests.service.conftest import DaemonThread

KB = Path(__file__).parent / "data" / "kernelbench_mini"
# Correct for the fixture's L1/1 (tanh(x) * 0.5), wrong for the built-in L1/1 (GELU).
SCALED_TANH = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.tanh(x).mul(self.scale)
'''


def _request(task: pb.TaskRef) -> pb.ScoreRequest:
    return pb.ScoreRequest(task=task, candidate=pb.Candidate(source=b"class ModelNew: pass\n", sample_id="s"))


def test_two_suites_with_the_same_ids_are_never_confused():
    mine = kernelbench_suite(KB).load("L1/1")
    theirs = builtin_suite().load("L1/1")
    assert mine.sha256 != theirs.sha256
    d = DaemonThread()  # resolves names in the built-in suite
    try:
        ch, stub = d.stub()
        with ch:
            with pytest.raises(grpc.RpcError) as err:
                stub.Score(_request(pb.TaskRef(name="L1/1", sha256=mine.sha256)), timeout=30)
            assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            msg = err.value.details()
            assert mine.sha256[:12] in msg and theirs.sha256[:12] in msg and "built-in suite" in msg
            # The same name with the daemon's own content, or with no hash at all, is scored.
            for ref in (pb.TaskRef(name="L1/1", sha256=theirs.sha256), pb.TaskRef(name="L1/1")):
                assert stub.Score(_request(ref), timeout=30).verdict == pb.VERDICT_OK
            with pytest.raises(grpc.RpcError) as err:
                stub.Score(_request(pb.TaskRef(name="L1/1", sha256="xyz")), timeout=30)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            # An inline source whose hash does not match what was sent is malformed.
            src = pb.TaskSource(source=mine.source.encode(), name="mine")
            with pytest.raises(grpc.RpcError) as err:
                stub.Score(_request(pb.TaskRef(source=src, sha256=theirs.sha256)), timeout=30)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert stub.Score(_request(pb.TaskRef(source=src, sha256=mine.sha256)), timeout=30).verdict == pb.VERDICT_OK
    finally:
        d.stop()


@pytest.mark.slow
def test_learner_farm_scores_against_its_own_kernelbench_suite(tmp_path):
    """The learner's local daemon resolves the learner's KernelBench-layout suite: a kernel that is
    right for the suite's L1/1 (and wrong for the built-in L1/1) is OK."""
    from learner.rl.farm import Farm, FarmSettings
    from learner.rl.tasks import load_task_set

    tasks = load_task_set(str(KB), "L1/1")
    assert tasks[0].sha256 == kernelbench_suite(KB).load("L1/1").sha256
    settings = FarmSettings(local_device="cpu", options={"num_correctness_inputs": 5, "timing_budget_s": 0.5,
                                                         "min_timed_rounds": 7})
    with Farm(settings, tmp_path, task_suite=str(KB), task_hashes={t.task_id: t.sha256 for t in tasks}) as farm:
        farm.submit("a", "L1/1", SCALED_TANH)
        out = farm.wait(["a"], timeout_s=300)["a"]
    assert out.verdict == "OK", out.detail
