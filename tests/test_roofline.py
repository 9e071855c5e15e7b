"""The roofline evidence (evalfarm.judge.roofline): FLOPs and bytes of one call, the peak table and
the achieved fractions as pure functions, and the evidence of an OK result on CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge import roofline
from evalfarm.scoring import as_candidate, as_task, score

DATA = Path(__file__).parent / "data"


def test_flops_are_flop_counter_modes_and_do_not_import_dynamo():
    a, b = torch.rand(64, 32), torch.rand(32, 48)
    lin = torch.nn.Linear(48, 16)
    flops, note = roofline.count_flops(lambda: lin(a @ b).relu())
    assert note == "" and flops == 2 * 64 * 32 * 48 + 2 * 64 * 48 * 16
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        lin(a @ b).relu()
    assert flops == counter.get_total_flops()
    assert roofline.count_flops(lambda: torch.relu(a))[0] == 0  # elementwise work counts nothing
    flops, note = roofline.count_flops(lambda: 1 / 0)
    assert flops is None and "ZeroDivisionError" in note


def test_counting_does_not_import_dynamo():
    # In a fresh interpreter: importing torch._dynamo costs the judge's set-up seconds on a GPU host.
    code = ("import sys, torch; from evalfarm.judge import precision, roofline; "
            "print(roofline.count_flops(lambda: torch.rand(8, 8) @ torch.rand(8, 8))[0], "
            "len(precision.float64_call(torch.nn.Identity(), [torch.rand(2, dtype=torch.float64)])), "
            "'torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1], check=True)
    assert out.stdout.split() == ["1024", "1", "False"], out.stdout + out.stderr


def test_bytes_are_inputs_outputs_and_weights_once():
    class Scaled(torch.nn.Linear):
        def forward(self, x, scale):
            return super().forward(x) * scale

    model = Scaled(32, 16)
    x = torch.rand(8, 32)
    counts = roofline.count(model, [x, 3], [((8, 16), torch.float32)])
    assert counts.bytes_parts == {"inputs": 8 * 32 * 4, "outputs": 8 * 16 * 4, "weights": (32 * 16 + 16) * 4}
    assert counts.bytes == sum(counts.bytes_parts.values()) and counts.flops == 2 * 8 * 32 * 16
    assert counts.dtype == torch.float32
    assert roofline.compute_dtype([torch.int64], [torch.float16]) == torch.float16
    assert roofline.compute_dtype([torch.bool]) is None


@pytest.mark.parametrize(("name", "cc", "key"), [
    ("NVIDIA H100 80GB HBM3", (9, 0), "H100 SXM"),
    ("NVIDIA H100 PCIe", (9, 0), "H100 PCIe"),
    ("NVIDIA H100 NVL", (9, 0), None),
    ("NVIDIA H200", (9, 0), "H200 SXM"),
    ("NVIDIA H200 NVL", (9, 0), None),
    ("NVIDIA GH200 480GB", (9, 0), None),
    ("NVIDIA A100-SXM4-80GB", (8, 0), "A100 SXM4 80GB"),
    ("NVIDIA A100 80GB PCIe", (8, 0), "A100 PCIe 80GB"),
    ("NVIDIA A100-SXM4-40GB", (8, 0), "A100 40GB"),
    ("NVIDIA A100-PCIE-40GB", (8, 0), "A100 40GB"),
    ("NVIDIA GeForce RTX 4090", (8, 9), None),
    ("NVIDIA H100 80GB HBM3", (8, 0), None),  # a name and a capability that disagree: not guessed
])
def test_the_peak_table_knows_its_cards_by_name_and_capability(name, cc, key):
    assert roofline.table_entry(name, cc) == key


def test_peaks_per_dtype_nvml_first_and_null_where_unknown():
    h100 = roofline.peaks("cuda", "NVIDIA H100 80GB HBM3", (9, 0), torch.float32, 3.35e12, "matched by UUID")
    assert h100["flops_per_s"] == 66.9e12 and h100["dram_bytes_s"] == 3.35e12 and h100["dram_source"] == "nvml"
    half = roofline.peaks("cuda", "NVIDIA H100 80GB HBM3", (9, 0), torch.bfloat16, None, "pynvml not installed")
    assert half["flops_per_s"] == 989.4e12 and half["dram_bytes_s"] == 3.35e12
    assert half["dram_source"].startswith("table") and "pynvml" in half["dram_source"]
    a100 = roofline.peaks("cuda", "NVIDIA A100-SXM4-40GB", (8, 0), torch.float16)
    assert a100["flops_per_s"] == 312e12 and a100["dram_bytes_s"] == 1.555e12
    unknown = roofline.peaks("cuda", "NVIDIA GeForce RTX 4090", (8, 9), torch.float32, 1.0e12)
    assert unknown["flops_per_s"] is None and "not in the peak table" in unknown["note"]
    assert unknown["dram_bytes_s"] == 1.0e12  # NVML's reading stands on its own
    no_dtype = roofline.peaks("cuda", "NVIDIA H200", (9, 0), None)
    assert no_dtype["flops_per_s"] is None and no_dtype["dram_bytes_s"] == 4.8e12
    cpu = roofline.peaks("cpu", "Some CPU", None, torch.float32)
    assert cpu["flops_per_s"] is None and cpu["dram_bytes_s"] is None and "CPU" in cpu["note"]


def test_achieved_rates_and_fractions():
    pk = {"flops_per_s": 100e12, "dram_bytes_s": 2e12}
    a = roofline.achieved(2_000_000_000, 40_000_000, 100.0, pk)  # 2 GFLOP and 40 MB in 100 us
    assert a["tflops"] == pytest.approx(20.0) and a["tbps"] == pytest.approx(0.4)
    assert a["flop_fraction"] == pytest.approx(0.2) and a["byte_fraction"] == pytest.approx(0.2)
    none = roofline.achieved(None, 40_000_000, 100.0, {"flops_per_s": None, "dram_bytes_s": None})
    assert none["tflops"] is None and none["flop_fraction"] is None and none["byte_fraction"] is None
    assert none["tbps"] == pytest.approx(0.4)
    assert roofline.achieved(1, 1, 0.0, pk)["tflops"] is None
    counts = roofline.Counts(0, {"inputs": 8, "outputs": 8, "weights": 0}, torch.float32)
    ev = roofline.evidence(counts, 10.0, 5.0, pk)
    assert ev["flops"] == 0 and "0 FLOPs" in ev["note"] and ev["cand"]["tbps"] == 2 * ev["ref"]["tbps"]


def test_an_ok_result_on_cpu_has_achieved_rates_without_peaks(build_pool):
    cfg = ScoreConfig(num_correctness_inputs=20, timing_budget_s=1.0, min_timed_rounds=21, reverify_above=0)
    r = score(as_task(str(DATA / "task_matmul_rand.py")), as_candidate(str(DATA / "cand_matmul_same.py")), cfg,
              build_pool=build_pool)
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    rl = r.evidence.roofline
    n = 256
    assert rl["flops"] == 2 * n**3 and rl["bytes_parts"] == {"inputs": 2 * n * n * 4, "outputs": n * n * 4, "weights": 0}
    assert rl["arithmetic_intensity"] == pytest.approx(2 * n**3 / (3 * n * n * 4))
    t = r.evidence.timing
    for side, us in (("ref", t.ref_time_us_median), ("cand", t.cand_time_us_median)):
        assert rl[side]["time_us"] == us and rl[side]["tflops"] == pytest.approx(2 * n**3 / us / 1e6)
        assert rl[side]["tbps"] > 0 and rl[side]["flop_fraction"] is None and rl[side]["byte_fraction"] is None
    assert rl["peaks"]["flops_per_s"] is None and "CPU" in rl["peaks"]["note"] and rl["peaks"]["dtype"] == "float32"
    assert "roofline" in r.to_dict()["evidence"]
