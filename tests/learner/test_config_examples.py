"""The hardware examples say what is true: each memory-plan line of configs/tpu_pod.py and
configs/gpu_cluster.py is what learner.runtime.device_memory computes, the hardware a config is written for
fits, its model path is one the loader accepts, and gpu_cluster's cost follows from its sizes and
the measured times it cites."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from learner.config_check import (
    TrainConfigError,
    hf_dir_form_problem,
    load_config_file,
    validate_config,
)
from learner.runtime.device_memory import (
    GB,
    HARDWARE_BYTES,
    PlanInputs,
    model_shape,
    plan_memory,
)

ROOT = Path(__file__).resolve().parents[2]
PLAN_LINE = re.compile(r"^\s+(qwen[\w.-]+) on (\w+) x(\d+): ~(\d+) GB of an? ([\d.]+) GB budget: (fits|does not fit)$",
                       re.M)


def _doc(config: str) -> str:
    return (ROOT / "configs" / f"{config}.py").read_text().split('"""')[1]


@pytest.mark.parametrize("config", ["tpu_pod", "gpu_cluster"])
def test_the_memory_plan_lines_are_what_the_plan_computes(config):
    cfg = load_config_file(str(ROOT / "configs" / f"{config}.py"))
    lines = PLAN_LINE.findall(_doc(config))
    assert len(lines) >= 2
    for model, hardware, devices, total_gb, budget_gb, verdict in lines:
        plan = plan_memory(model_shape(model), PlanInputs.from_config(cfg, int(devices)), HARDWARE_BYTES[hardware])
        assert round(plan.total / GB) == int(total_gb), (model, hardware, devices, plan.format())
        assert f"{plan.budget / GB:.1f}" == budget_gb
        assert plan.fits == (verdict == "fits"), (model, hardware, devices)


def test_the_tpu_example_fits_the_hardware_it_names():
    doc = _doc("tpu_pod")
    first = doc.splitlines()[0]
    m = re.search(r"TPU (v\d\w)-(\d+) host \((\d+) chips", first)
    assert m, first
    hardware, chips = m.group(1), int(m.group(3))
    cfg = load_config_file(str(ROOT / "configs" / "tpu_pod.py"))
    plan = plan_memory(model_shape("qwen2.5-7b"), PlanInputs.from_config(cfg, chips), HARDWARE_BYTES[hardware])
    assert plan.fits, plan.format()
    assert f"qwen2.5-7b on {hardware} x{chips}: ~{round(plan.total / GB)} GB" in doc


@pytest.mark.parametrize("config", ["tpu_pod", "gpu_cluster"])
def test_the_model_paths_are_ones_the_loader_accepts(config):
    cfg = load_config_file(str(ROOT / "configs" / f"{config}.py"))
    paths = [cfg.model.hf_dir, *re.findall(r"--config\.model\.hf_dir=(\S+)", _doc(config))]
    for path in paths:
        assert hf_dir_form_problem(path) is None, path
        assert Path(path).is_absolute(), path


def test_a_url_or_a_missing_directory_is_refused_at_start_with_what_to_do(tmp_path):
    from configs import demo

    cfg = demo.get_config()
    cfg.model.hf_dir = "gs://bucket/Qwen2.5-Coder-7B-Instruct"
    with pytest.raises(TrainConfigError, match=r"config\.model\.hf_dir='gs://.*not a gs:// URL.*gsutil -m cp -r"):
        validate_config(cfg)
    cfg.model.hf_dir = str(tmp_path / "nowhere")
    with pytest.raises(TrainConfigError, match="no such directory"):
        validate_config(cfg)
    cfg.model.hf_dir = str(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(TrainConfigError, match=r"no tokenizer\.json"):
        validate_config(cfg)
    (tmp_path / "tokenizer.json").write_text("{}")
    validate_config(cfg)


def test_gpu_cluster_states_what_a_run_costs_from_the_measured_times():
    doc = " ".join(_doc("gpu_cluster").split())
    benchmarks = " ".join((ROOT / "docs" / "benchmarks.md").read_text().split())
    cfg = load_config_file(str(ROOT / "configs" / "gpu_cluster.py"))
    learner = re.search(r"learner: one RL step ([\d.]+) s on (\d+) x (H\d+) = ([\d.]+) GPU-hours", doc)
    farm = re.search(r"farm: (\d+) candidates a step, ([\d.]+) per minute per (H\d+) slot = ([\d.]+) GPU-hours", doc)
    total = re.search(r"total: ([\d.]+) GPU-hours per RL step; (\d+) GPU-hours for the (\d+) RL steps", doc)
    assert learner and farm and total, doc
    step_s, gpus, per_minute = float(learner.group(1)), int(learner.group(2)), float(farm.group(2))
    # The cited measurements are the ones docs/benchmarks.md reports.
    assert f"{learner.group(3)} " in benchmarks and re.search(rf"RL step \(16 prompts x G=8.*?\) {step_s:g} s", benchmarks)
    assert f"| {per_minute:g} |" in benchmarks
    # The figures follow from them and from this config's sizes.
    assert int(farm.group(1)) == cfg.rl.tasks_per_step * cfg.rl.group_size
    assert int(total.group(3)) == cfg.rl.steps
    learner_h = step_s * gpus / 3600
    farm_h = int(farm.group(1)) * 60 / per_minute / 3600
    assert float(learner.group(4)) == pytest.approx(learner_h, abs=0.005)
    assert float(farm.group(4)) == pytest.approx(farm_h, abs=0.005)
    assert float(total.group(1)) == pytest.approx(learner_h + farm_h, abs=0.005)
    assert int(total.group(2)) == pytest.approx((learner_h + farm_h) * cfg.rl.steps, abs=1.5)
    farm_gpus = re.search(r"A farm of about (\d+) GPUs", doc)
    assert farm_gpus and int(farm_gpus.group(1)) == pytest.approx(farm_h * 3600 / step_s, abs=1)
