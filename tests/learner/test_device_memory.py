"""The memory plan: sizes from shapes, a config that cannot fit is refused with the knob to turn,
and the shipped 7B configs fit 8xH200 and a v5p-8."""

from __future__ import annotations

from pathlib import Path

import pytest

from learner.config_check import load_config_file
from learner.runtime.device_memory import (
    HARDWARE_BYTES,
    MemoryPlanError,
    PlanInputs,
    main,
    model_shape,
    plan_memory,
    rollout_rows_note,
)

ROOT = Path(__file__).resolve().parents[2]


def test_plan_items_follow_the_mesh() -> None:
    m = model_shape("qwen2.5-7b")
    one = plan_memory(m, PlanInputs(data=1, fsdp=1, tensor=1, micro_batch_tokens=262144), 1e15)
    eight = plan_memory(m, PlanInputs(data=1, fsdp=8, tensor=1, micro_batch_tokens=262144), 1e15)
    by = {x.name: x.bytes_per_device for x in one.lines}
    by8 = {x.name: x.bytes_per_device for x in eight.lines}
    assert by["params"] == m.num_params() * 4  # float32 params on one device
    assert by["optimizer (AdamW mu, nu)"] == 2 * by["params"]
    assert by["reference policy"] == m.num_params() * 2  # bf16
    assert by8["params"] == pytest.approx(by["params"] / 8)
    assert by8["rollout copy"] == by["rollout copy"]  # replicated over the batch axes
    assert by8["KV cache"] == pytest.approx(by["KV cache"] / 8)
    assert by8["activations / micro-batch"] < by["activations / micro-batch"] / 7
    no_ref = plan_memory(m, PlanInputs(data=1, fsdp=1, tensor=1, reference_dtype=None), 1e15)
    assert "reference policy" not in {x.name for x in no_ref.lines}


def test_a_plan_that_cannot_fit_is_refused_with_the_knob() -> None:
    m = model_shape("qwen2.5-7b")
    big = PlanInputs(data=1, fsdp=8, tensor=1, micro_batch_tokens=4_000_000, max_seq_len=8192)
    plan = plan_memory(m, big, HARDWARE_BYTES["h200"])
    assert not plan.fits
    with pytest.raises(MemoryPlanError, match="train.micro_batch_tokens"):
        plan.check()
    small = plan_memory(m, PlanInputs(data=1, fsdp=8, tensor=1, micro_batch_tokens=65536),
                        HARDWARE_BYTES["h200"])
    small.check()  # fits: no error
    assert "fits" in small.format().splitlines()[-1]


@pytest.mark.parametrize(("config", "hardware", "devices"), [
    ("configs/gpu_cluster.py", "h200", 8),
    ("configs/tpu_pod.py", "v5p", 4),  # a v5p-8 slice: 4 chips
])
def test_shipped_7b_configs_fit(config: str, hardware: str, devices: int,
                                capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config_file(str(ROOT / config))
    plan = plan_memory(model_shape("qwen2.5-7b"), PlanInputs.from_config(cfg, devices),
                       HARDWARE_BYTES[hardware])
    plan.check()
    assert main(["--model", "qwen2.5-7b", "--hardware", hardware, "--devices", str(devices),
                 "--config", str(ROOT / config)]) == 0
    out = capsys.readouterr().out
    assert "KV cache" in out and "fits" in out


def test_few_rollout_rows_per_data_parallel_device_are_named_with_the_knob() -> None:
    # configs/gpu_cluster.py's 64 rows on 8 GPUs: 8 per GPU, mostly the weights' read per step.
    note = rollout_rows_note(PlanInputs(data=1, fsdp=8, tensor=1, rollout_rows=64))
    assert note is not None and "8 per device" in note and "sampling.batch_size" in note
    assert "mesh.tensor" in note and "rl.tasks_per_step" in note
    # Both batch axes carry rows; the tensor axis does not.
    assert "16 per device" in rollout_rows_note(PlanInputs(data=2, fsdp=2, tensor=2, rollout_rows=64))
    # Enough rows per device, or a single replica: nothing to say.
    assert rollout_rows_note(PlanInputs(data=1, fsdp=2, tensor=1, rollout_rows=128)) is None
    assert rollout_rows_note(PlanInputs(data=1, fsdp=1, tensor=8, rollout_rows=8)) is None
