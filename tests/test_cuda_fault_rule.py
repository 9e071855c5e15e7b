"""The CUDA-fault rule (evalfarm.judge.cuda_fault): one answer for a caught error and a dead worker."""

from evalfarm.judge.cuda_fault import MARKERS, is_cuda_fault


def test_each_marker_is_a_cuda_fault_on_a_gpu_and_never_on_a_cpu():
    for marker in MARKERS:
        text = f"RuntimeError: {marker} (while running the candidate)"
        assert is_cuda_fault(text, "cuda"), marker
        assert not is_cuda_fault(text, "cpu"), marker


def test_an_ordinary_error_that_mentions_cuda_is_not_a_fault():
    for text in ("RuntimeError: Expected all tensors to be on the same device, but found cuda:0 and cpu",
                 "AssertionError: Torch not compiled with CUDA enabled",
                 "ValueError: shapes (16, 3) and (4, 3) do not match"):
        assert not is_cuda_fault(text, "cuda"), text


def test_the_worker_and_the_blame_rule_use_it():
    # the two places a candidate's failure becomes CUDA_FAULT: the worker's caught errors, and a
    # worker that ended (its last words); neither keeps its own list
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "evalfarm" / "judge"
    for name in ("worker.py", "blame.py"):
        text = (root / name).read_text()
        assert "is_cuda_fault(" in text, name
        assert "illegal memory access" not in text, name
