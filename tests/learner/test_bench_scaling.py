"""The multi-GPU scaling benchmark (learner.bench.scaling), run on simulated CPU devices: the same
global batch on 1 and N devices, per-device micro-batches, the efficiency table, a run config's
policy against its memory plan, and the sharded-equals-single check through its command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from learner.bench.scaling import compare_table, efficiency, parity_mesh_config

ROOT = Path(__file__).resolve().parents[2]


def _cli(args: list[str], devices: int, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    proc = subprocess.run([sys.executable, "-m", "learner.bench.scaling", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def test_efficiency_is_one_device_throughput_times_n_over_n_device_throughput() -> None:
    assert efficiency(8.0, 2.0, 4) == pytest.approx(1.0)
    assert efficiency(8.0, 4.0, 4) == pytest.approx(0.5)
    assert efficiency(8.0, 8.0, 1) == pytest.approx(1.0)


def _run(n: int, step: float, train: float) -> dict:
    return {"devices": n, "device_kind": "H100", "jax_version": "x", "errors": [],
            "model": {"name": "m", "num_params": 1.5e9},
            "rl": {"step_s": step, "rollout_s": step / 2, "reference_s": step / 4, "update_s": step / 4,
                   "rollout_tokens_per_s": 1000.0 * n},
            "train": {"step_time_s": train, "mfu": 0.4}, "peak_gb_per_device": [10.0] * n}


def test_compare_table_reports_each_device_count_against_one_device() -> None:
    table = compare_table({(1, 1): _run(1, 8.0, 4.0), (4, 1): _run(4, 2.5, 1.25)})
    row4 = next(line for line in table.splitlines() if line.startswith("| 4 |"))
    assert "80% (80% / 80% / 80%)" in row4  # 8 / (4 x 2.5)
    assert "| >= 90% |" in row4
    alone = compare_table({(4, 1): _run(4, 2.5, 1.25)})
    assert "no one-device run" in alone and "| 4 | 2.50 " in alone and "| - (- / - / -) |" in alone
    # A tensor-split run is a row of its own beside the fsdp-only run of the same device count.
    both = compare_table({(1, 1): _run(1, 8.0, 4.0), (4, 1): _run(4, 2.5, 1.25), (4, 2): _run(4, 2.0, 1.25)})
    row_t = next(line for line in both.splitlines() if line.startswith("| 4 (tensor 2) |"))
    assert "100% (100% / 100% / 100%)" in row_t  # 8 / (4 x 2.0)
    assert next(line for line in both.splitlines() if line.startswith("| 4 |"))
    # So is a run of the same devices across processes (scaling_4_p4.json).
    procs = compare_table({(1, 1, 1): _run(1, 8.0, 4.0), (4, 1, 1): _run(4, 2.5, 1.25), (4, 1, 4): _run(4, 4.0, 1.25)})
    row_p = next(line for line in procs.splitlines() if line.startswith("| 4 (4 processes) |"))
    assert "50% (50% / 50% / 50%)" in row_p  # 8 / (4 x 4.0)


def test_result_names_and_parts() -> None:
    from learner.bench.scaling import ScalingArgumentError, result_name, run_scaling

    assert [result_name(2), result_name(4, 2), result_name(2, 1, 2), result_name(4, 2, 2)] == [
        "scaling_2.json", "scaling_4_tensor2.json", "scaling_2_p2.json", "scaling_4_tensor2_p2.json"]
    with pytest.raises(ScalingArgumentError, match="choose from rl,train"):
        run_scaling("tiny", [None], Path("/nonexistent"), parts=["rl", "decode"])  # type: ignore[list-item]


def test_a_tensor_split_that_does_not_divide_the_devices_is_refused() -> None:
    from learner.bench.scaling import main

    with pytest.raises(SystemExit, match="must be >= 1 and divide the 1 device"):
        main(["run", "--devices", "1", "--tensor", "2", "--suite", "tiny"])


def test_steps_per_check_below_one_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from learner.bench.scaling import main

    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--devices", "1", "--steps-per-check", "0", "--suite", "tiny"])
    assert exit_info.value.code == 2
    assert "--steps-per-check: must be >= 1, got 0" in capsys.readouterr().err


def test_parity_mesh_uses_the_axes_the_device_count_allows() -> None:
    assert (parity_mesh_config(2).data, parity_mesh_config(2).tensor) == (1, 1)
    assert (parity_mesh_config(4).data, parity_mesh_config(4).tensor) == (2, 1)
    assert (parity_mesh_config(8).data, parity_mesh_config(8).tensor) == (2, 2)


@pytest.mark.long  # a scaling run on 1 and 4 simulated devices: about 2 minutes on 2 cores
def test_scaling_run_on_one_and_four_devices_keeps_the_global_batch(tmp_path: Path) -> None:
    for n in ("1", "4"):
        _cli(["run", "--suite", "tiny", "--devices", n, "--out-dir", str(tmp_path)], devices=4)
    one = json.loads((tmp_path / "scaling_1.json").read_text())
    four = json.loads((tmp_path / "scaling_4.json").read_text())
    assert one["errors"] == [] and four["errors"] == []
    assert (one["rl"]["devices"], four["rl"]["devices"], four["train"]["devices"]) == (1, 4, 4)
    for key in ("prompts", "group", "prompt_len", "max_new"):
        assert one["rl"][key] == four["rl"][key]
    assert (one["train"]["batch"], one["train"]["seq"]) == (four["train"]["batch"], four["train"]["seq"])
    # Micro-batches are sized per device: four devices take the batch in a quarter of the count.
    assert one["train"]["micro_batches"] == 4 * four["train"]["micro_batches"]
    assert one["rl"]["micro_batches"] == 4 * four["rl"]["micro_batches"]
    # The same global batch with the weights split two ways on the tensor axis.
    _cli(["run", "--suite", "tiny", "--devices", "4", "--tensor", "2", "--out-dir", str(tmp_path)], devices=4)
    split = json.loads((tmp_path / "scaling_4_tensor2.json").read_text())
    assert split["errors"] == [] and split["tensor"] == 2
    assert split["rl"]["mesh"] == {"data": 1, "fsdp": 2, "tensor": 2}
    assert split["rl"]["prompts"] == one["rl"]["prompts"] and split["train"]["batch"] == one["train"]["batch"]
    table = _cli(["compare", "--out-dir", str(tmp_path)], devices=1).stdout
    assert next(line for line in table.splitlines() if line.startswith("| 4 |"))
    assert next(line for line in table.splitlines() if line.startswith("| 4 (tensor 2) |"))


@pytest.mark.long  # one tiny RL step in one process on 2 devices and in 2 processes: ~1-2 minutes on 2 cores
def test_the_rl_step_runs_across_two_processes_through_the_launcher(tmp_path: Path) -> None:
    _cli(["run", "--suite", "tiny", "--parts", "rl", "--devices", "2", "--out-dir", str(tmp_path)], devices=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEARNER_", "JAX_", "XLA_"))}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), PYTHON=sys.executable, LEARNER_LOG_DIR=str(tmp_path / "logs"))
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "learner_processes.sh"), "2", "-m", "learner.bench.scaling",
                           "run", "--suite", "tiny", "--parts", "rl", "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + (tmp_path / "logs" / "process-1.log").read_text()[-3000:]
    one, two = (json.loads((tmp_path / name).read_text()) for name in ("scaling_2.json", "scaling_2_p2.json"))
    assert one["processes"] == 1 and two["processes"] == 2 and two["errors"] == [] and "train" not in two
    # The same global batch on the same mesh: every row decoded, the same micro-batches.
    for key in ("prompts", "group", "new_tokens", "micro_batches", "mesh"):
        assert two["rl"][key] == one["rl"][key], key
    table = _cli(["compare", "--out-dir", str(tmp_path)], devices=1).stdout
    assert next(line for line in table.splitlines() if line.startswith("| 2 (2 processes) |"))
    # The training step's benchmark across processes is refused before anything runs.
    refused = subprocess.run(["bash", str(ROOT / "scripts" / "learner_processes.sh"), "2", "-m",
                              "learner.bench.scaling", "run", "--suite", "tiny", "--out-dir", str(tmp_path / "no")],
                             capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert refused.returncode != 0 and "only the RL step runs across processes" in refused.stderr
    assert not (tmp_path / "no" / "scaling_2_p2.json").exists()


@pytest.mark.long  # a scaling run of a config policy: about 30-60 s on 2 cores
def test_big_runs_a_config_policy_and_reports_its_plan(tmp_path: Path) -> None:
    config = tmp_path / "small.py"
    config.write_text(textwrap.dedent("""
        from configs.common import base_config

        def get_config():
            c = base_config()
            c.model.param_dtype = "float32"
            c.model.compute_dtype = "float32"
            c.mesh.data, c.mesh.fsdp, c.mesh.tensor = 1, -1, 1
            c.max_seq_len = 64
            c.sampling.max_new_tokens = 16
            c.sampling.batch_size = 8
            c.train.micro_batch_tokens = 128
            c.sft.batch_size = 4
            c.rl.tasks_per_step = 2
            c.rl.group_size = 4
            return c
        """))
    out = _cli(["big", "--config", str(config), "--model", "tiny", "--out-dir", str(tmp_path)], devices=2).stdout
    res = json.loads((tmp_path / "big_2.json").read_text())
    assert res["errors"] == [] and res["plan_fits"], res
    assert res["sft"]["rows"] == 4 and res["sft"]["seq"] == 64
    assert (res["rl"]["prompts"], res["rl"]["group"], res["rl"]["max_new"], res["rl"]["prompt_len"]) == (2, 4, 16, 48)
    assert "memory plan per device" in out and "SFT step, 4 x 64 tokens" in out
    assert "GB/device" in out  # the plan itself is printed first


@pytest.mark.long  # the parity command on 4 simulated devices: about 1 minute on 2 cores
def test_parity_command_passes_on_four_simulated_devices() -> None:
    out = _cli(["parity", "--devices", "all"], devices=4).stdout
    report = json.loads(next(x for x in out.splitlines() if x.startswith("PARITY "))[len("PARITY "):])
    assert report["devices"] == 4 and report["mesh"]["data"] == 2 and report["generation"] == "equal"
    assert report["max_weight_diff"] < 1e-4 and report["max_update_diff_ratio"] < 1e-3


def test_compare_updates_passes_reduction_noise_and_fails_a_wrong_update() -> None:
    import numpy as np

    from learner.bench.scaling import compare_updates

    rng = np.random.default_rng(0)
    init = [rng.normal(size=(256, 256)), rng.normal(size=(64,))]
    lr = 1e-3
    single = [w - lr * np.sign(rng.normal(size=w.shape)) for w in init]  # Adam-like steps of lr
    noisy = [w.copy() for w in single]
    noisy[0][253, 113] += 0.14 * lr  # one near-eps weight moved differently (as seen on an H100)
    worst, ratio = compare_updates(init, single, noisy)
    assert worst == pytest.approx(0.14 * lr) and ratio < 1e-3
    halved = [single[0], init[1] + 0.5 * (single[1] - init[1])]  # half of one weight's update applied
    with pytest.raises(AssertionError, match=r"weight 1 \(64,\)"):
        compare_updates(init, single, halved)
    shuffled = [init[0] + rng.permutation(single[0] - init[0]), single[1]]  # rows of the update permuted
    with pytest.raises(AssertionError, match="weight 0"):
        compare_updates(init, single, shuffled)
