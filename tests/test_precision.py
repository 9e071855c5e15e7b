"""The precision gate (evalfarm.judge.precision): its rules as pure functions, then through the real
judge and workers on CPU. A candidate that computes an fp32 matmul as TF32 would (mantissas rounded
to 10 bits) stays within the strict 1e-4 tolerance on uniform [0, 1) inputs, yet is about 100x less
precise than the reference against a float64 ground truth: refused. Honest reorderings (split-K,
another summation order) and the reference itself pass."""

from __future__ import annotations

import random
import types
from pathlib import Path

import pytest
import torch

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge import precision
from evalfarm.judge.inputs import InputSource
from evalfarm.scoring import as_candidate, as_task, score
from evalfarm.tasks.format import exec_module

DATA = Path(__file__).parent / "data"
ATTACK = Path(__file__).parent / "adversarial" / "runtime" / "tf32_emulated_matmul.py"
QUICK = ScoreConfig(num_correctness_inputs=40, timing_budget_s=1.0, min_timed_rounds=35, reverify_above=0)
F32_FLOOR = 32 * 2.0**-24


def _tf32(x: torch.Tensor) -> torch.Tensor:
    bits = x.contiguous().view(torch.int32)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF
    return bits.view(torch.float32)


# --- k, floor and when the gate applies --------------------------------------------------------

def test_k_is_pytorchs_and_the_floor_a_few_units_of_the_dtype():
    assert precision.multiplier(torch.float32, 65536) == 2.0
    assert precision.multiplier(torch.float16, 65536) == precision.multiplier(torch.bfloat16, 65536) == 3.0
    assert precision.multiplier(torch.float32, 1) == precision.multiplier(torch.float16, 10) == 10.0
    assert precision.multiplier(torch.float32, 11) == precision.multiplier(torch.float32, 500) == 8.0
    assert precision.multiplier(torch.float32, 501) == precision.multiplier(torch.float16, 999) == 3.0
    assert precision.multiplier(torch.float32, 1000) == 2.0
    assert precision.floor_for(torch.float32) == pytest.approx(F32_FLOOR)
    assert precision.floor_for(torch.float16) == pytest.approx(4 * 2.0**-11)
    assert precision.floor_for(torch.bfloat16) == pytest.approx(4 * 2.0**-8)
    assert [precision.gated_dtype(d) for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                               torch.int64, torch.bool, torch.complex64)] == [
        True, True, True, False, False, False, False]


def test_the_gate_applies_unless_tolerance_paper_or_no_gated_output():
    f32 = [torch.float32]
    assert precision.not_applied_reason("fp64", "honest", f32) == ""
    assert precision.not_applied_reason("fp64", "strict", f32) == ""  # the strictest policy keeps it
    assert "tolerance only" in precision.not_applied_reason("tolerance", "honest", f32)
    assert "paper" in precision.not_applied_reason("fp64", "paper", f32)
    assert "int64" in precision.not_applied_reason("fp64", "honest", [torch.int64])
    assert "float64" in precision.not_applied_reason("fp64", "honest", [torch.float64])
    assert precision.not_applied_reason("fp64", "honest", [torch.int64, torch.float16]) == ""
    assert ScoreConfig().precision_gate and not ScoreConfig(precision="tolerance").precision_gate
    assert not ScoreConfig(guard_policy="paper").precision_gate


def test_gated_rounds_are_secret_disjoint_correctness_rounds():
    plain, widened = precision.choose_rounds(1000, random.Random(1))
    assert len(plain) == precision.TASK_ROUNDS and len(widened) == precision.WIDENED_ROUNDS
    assert not set(plain) & set(widened) and all(0 <= r < 1000 for r in plain + widened)
    assert precision.choose_rounds(1000, random.Random(2)) != (plain, widened)
    assert precision.choose_rounds(1, random.Random(1)) == ([0], [])
    p, w = precision.choose_rounds(3, random.Random(1))
    assert len(p) == 2 and len(w) == 1 and sorted(p + w) == [0, 1, 2]


# --- widened inputs ----------------------------------------------------------------------------

def test_only_torch_rand_like_inputs_are_widened():
    g = torch.Generator().manual_seed(0)
    rand = torch.rand(64, 32, generator=g)
    sym = torch.rand(16, 16, generator=g)
    sym = (sym + sym.t()) / 2
    inputs = [
        rand,                                                 # 0: widened
        torch.randn(64, 32, generator=g),                     # 1: already signed
        (torch.rand(64, 64, generator=g) < 0.3).float(),      # 2: a 0/1 mask
        torch.nn.functional.one_hot(torch.arange(8) % 4).float(),  # 3: one-hot
        torch.randint(0, 10, (32,), generator=g),             # 4: integer dtype
        torch.rand(8, 10, generator=g).softmax(dim=1),        # 5: probability rows
        torch.rand(1, generator=g),                           # 6: a single number
        3,                                                    # 7: not a tensor
        sym,                                                  # 8: widened, symmetrically
        torch.triu(torch.rand(16, 16, generator=g) + 0.1),    # 9: widened, zeros stay zero
    ]
    spec, notes = precision.widening_spec(inputs)
    assert spec.positions == (0, 8, 9) and spec.symmetric == (False, True, False)
    joined = " ".join(notes)
    for why in ("already signed", "integer-valued", "probability", "single number"):
        assert why in joined, notes
    assert "never change" in precision.widenable(inputs[4]) and precision.widenable(inputs[7]) == "not a tensor"
    out = precision.widen(inputs, spec, seed=123)
    assert torch.equal(out[0].abs(), rand) and 0.4 < float((out[0] < 0).float().mean()) < 0.6
    assert torch.equal(out[8], out[8].t()) and bool((out[8] < 0).any())
    assert torch.equal(out[9].tril(-1), torch.zeros(16, 16))  # triangular structure kept
    for i in (1, 2, 3, 4, 5, 6, 7):
        assert out[i] is inputs[i]
    assert torch.equal(precision.widen(inputs, spec, 123)[0], out[0])  # same seed, same draw
    assert not torch.equal(precision.widen(inputs, spec, 124)[0], out[0])
    assert torch.equal(rand.abs(), rand)  # the draw itself is never changed in place


def test_a_task_that_refuses_widened_inputs_is_not_widened():
    struct = [((4,), torch.float32)]
    x = -torch.rand(4) - 0.1
    assert "not finite" in precision.widened_refusal(lambda v: torch.log(v[0]), [x], struct)

    def refuses(v):
        if bool((v[0] < 0).any()):
            raise ValueError("inputs must be non-negative")
        return v[0]

    assert "raised ValueError: inputs must be non-negative" in precision.widened_refusal(refuses, [x], struct)
    assert "shape or dtype" in precision.widened_refusal(lambda v: v[0].double(), [x], struct)
    assert precision.widened_refusal(lambda v: v[0] * 2, [x], struct) == ""


def test_input_source_widens_only_its_widened_rounds():
    mod = exec_module((DATA / "task_matmul_rand.py").read_text(), "task_matmul_rand", "task_matmul_rand.py")
    src = InputSource(mod, "cpu", secret=b"s" * 32)
    before = src.inputs(5)
    spec, _ = precision.widening_spec(src.inputs(-1))
    src.widen(spec, [5])
    widened = src.inputs(5)
    assert all(bool((a < 0).any()) and torch.equal(a.abs(), b) for a, b in zip(widened, before, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(src.inputs(5), widened, strict=True))  # repeatable
    assert all(bool((a >= 0).all()) for a in src.inputs(6))
    src.widen(precision.WidenSpec(), [5])
    assert all(torch.equal(a, b) for a, b in zip(src.inputs(5), before, strict=True))


# --- the ground truth and the errors -------------------------------------------------------------

def test_float64_is_a_ground_truth_only_where_nothing_computes_below_it():
    class Casts(torch.nn.Module):
        def forward(self, x):
            return (x.float() * 3).double()

    class Accumulates(torch.nn.Module):
        def forward(self, x):
            acc = torch.zeros(x.shape[1])  # float64 while the ground truth is computed
            for row in x:
                acc += row
            return acc

    x = torch.rand(8, 4, dtype=torch.float64)
    with pytest.raises(precision.NoGroundTruth, match="below float64"):
        precision.float64_call(Casts(), [x])
    (out,) = precision.float64_call(Accumulates(), [x])
    assert out.dtype == torch.float64 and torch.allclose(out, x.sum(0))
    assert torch.get_default_dtype() == torch.float32


def test_relative_errors_over_finite_places_and_none_for_a_zero_truth():
    g = torch.tensor([1.0, 2.0, float("inf"), 4.0], dtype=torch.float64)
    ref = torch.tensor([1.0, 2.0, float("inf"), 4.0 + 1e-6])
    cand = torch.tensor([1.0, 2.0 + 1e-5, float("inf"), 4.0])
    e_ref, e_cand = precision.relative_errors(precision.Truth(g, None), ref, cand)
    norm = float(torch.tensor([1.0, 2.0, 4.0]).norm())
    assert e_ref == pytest.approx(abs(float(torch.tensor(4.0 + 1e-6)) - 4.0) / norm)
    assert e_cand == pytest.approx(abs(float(torch.tensor(2.0 + 1e-5)) - 2.0) / norm)
    zero = precision.Truth(torch.zeros(3, dtype=torch.float64), None)
    assert precision.relative_errors(zero, torch.zeros(3), torch.ones(3)) is None


def test_a_large_output_is_compared_on_random_places(monkeypatch):
    monkeypatch.setattr(precision, "SAMPLE_ELEMENTS", 4096)
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(200, 100, generator=g), torch.rand(100, 300, generator=g)
    truth64 = a.double() @ b.double()
    kept = precision.keep_truth(truth64, torch.Generator().manual_seed(1))
    assert kept.index is not None and kept.values.numel() == 4096
    ref = (a @ b).t().contiguous().t()  # a strided view, as the arenas may hold
    tf32 = _tf32(a) @ _tf32(b)
    sampled = precision.relative_errors(kept, ref, tf32)
    whole = precision.relative_errors(precision.Truth(truth64.reshape(-1), None), ref, tf32)
    assert sampled[1] == pytest.approx(whole[1], rel=0.1) and sampled[1] > 50 * sampled[0]


def _gate(rounds: dict[int, str], out_struct=(((4, 4), torch.float32),)) -> tuple[precision.PrecisionGate, dict]:
    """A gate over synthetic rounds: truth t, inputs [t] (their fingerprint)."""
    data = {}
    truths = {}
    for r in rounds:
        t = torch.rand(4, 4, generator=torch.Generator().manual_seed(r)) + 1
        data[r] = t
        truths[r] = (precision.fingerprint([t]), [precision.Truth(t.double().reshape(-1), None)])
    return precision.PrecisionGate(truths, rounds, list(out_struct), [], "cpu", (0,)), data


def test_the_gate_decides_after_its_last_round_and_says_why():
    gate, data = _gate({2: precision.TASK, 5: precision.TASK, 7: precision.WIDENED})
    assert gate.expects(2) and not gate.expects(3)
    for r in (2, 5):
        t = data[r]
        assert gate.add(r, [t], [t * (1 + 1e-7)], [t * (1 + 1e-5)]) == ""  # not decided yet
    t = data[7]
    problem = gate.add(7, [t], [t * (1 + 1e-7)], [t * (1 + 1e-7)])
    assert problem.startswith("less precise than the reference: ") and "x its error against an fp64 ground truth" in problem
    assert "the task's own inputs" in problem and "allowed 8x" in problem  # 16 elements: k = 8
    ev = gate.evidence()
    assert ev["applied"] and ev["rounds"] == 3 and ev["widened_rounds"] == 1 and ev["group"] == precision.TASK
    assert ev["ratio"] > 30 and {o["group"] for o in ev["outputs"]} == {"task", "widened"}


def test_a_round_that_failed_the_tolerance_check_puts_its_errors_in_the_evidence():
    gate, data = _gate({3: precision.WIDENED, 6: precision.TASK})
    t = data[3]
    more = gate.describe_round(3, [t], [t * (1 + 1e-7)], [t * (1 + 1e-4)])
    assert more.startswith("less precise than the reference: ")
    ev = gate.evidence()  # the verdict came before the last gated round; the evidence still shows why
    assert ev["rounds"] == 1 and ev["group"] == precision.WIDENED and ev["ratio"] > 100
    assert not gate.expects(3) and gate.expects(6)
    assert gate.describe_round(4, [t], [t], [t * 2]) == ""  # not a gated round: nothing to add
    assert gate.evidence()["rounds"] == 1


def test_equal_errors_pass_and_a_changed_draw_is_skipped_with_a_note():
    gate, data = _gate({1: precision.TASK, 2: precision.TASK})
    assert gate.add(1, [data[1] + 1], [data[1]], [data[1] * 1.5]) == ""  # not the truth's inputs: skipped
    assert gate.add(2, [data[2]], [data[2] * (1 + 1e-6)], [data[2] * (1 + 1e-6)]) == ""
    ev = gate.evidence()
    assert ev["ratio"] == pytest.approx(1.0) and ev["outputs"][0]["rounds"] == 1
    assert any("differ from those the ground truth" in n for n in ev["notes"])


def test_prepare_with_the_task_module_and_its_input_source():
    mod = exec_module((DATA / "task_matmul_rand.py").read_text(), "task_matmul_rand", "task_matmul_rand.py")
    src = InputSource(mod, "cpu", secret=b"k" * 32)
    model = mod.Model()
    struct = [((256, 256), torch.float32)]
    gate, ev = precision.prepare(model, src, struct, torch.device("cpu"), 40, random.Random(3), flops=None)
    assert gate is not None and ev == {}
    assert next(model.parameters(), None) is None or next(model.parameters()).dtype == torch.float64
    widened = [r for r, g in gate.groups.items() if g == precision.WIDENED]
    plain = [r for r, g in gate.groups.items() if g == precision.TASK]
    assert len(widened) == 4 and len(plain) == 4 and gate.widened_inputs == (0, 1)
    assert all(bool((src.inputs(r)[0] < 0).any()) for r in widened)
    assert all(bool((src.inputs(r)[0] >= 0).all()) for r in plain)
    problems = []
    for r in sorted(gate.groups):
        a, b = src.inputs(r)
        ref = a @ b
        problems.append(gate.add(r, [a, b], [ref], [_tf32(a) @ _tf32(b)]))
    assert problems[:-1] == [""] * 7 and "less precise than the reference" in problems[-1]


def test_a_task_that_cannot_run_in_float64_has_no_gate_and_a_note():
    class NoDouble(torch.nn.Module):
        def forward(self, x):
            if x.dtype == torch.float64:
                raise RuntimeError("not implemented for 'Double'")
            return x * 2

    mod = types.SimpleNamespace(get_inputs=lambda: [torch.rand(8)], get_init_inputs=lambda: [])  # widenable
    src = InputSource(mod, "cpu", secret=b"n" * 32)
    gate, ev = precision.prepare(NoDouble(), src, [((8,), torch.float32)], torch.device("cpu"), 20,
                                 random.Random(0), flops=0)
    assert gate is None and ev["applied"] is False and "not implemented for 'Double'" in ev["note"]
    assert not src.widened_rounds  # no gate, no widened rounds


# --- through the real judge on CPU -----------------------------------------------------------------

@pytest.fixture(scope="module")
def matmul_task():
    return as_task(str(DATA / "task_matmul_rand.py"))


def _score(task, path: Path, build_pool, **changes):
    return score(task, as_candidate(str(path)), QUICK.replace(**changes) if changes else QUICK,
                 build_pool=build_pool)


def test_tf32_emulated_matmul_is_refused_as_less_precise(matmul_task, build_pool):
    r = _score(matmul_task, ATTACK, build_pool)
    assert r.verdict is Verdict.INCORRECT and r.speedup is None, (r.verdict, r.detail)
    assert "less precise than the reference: " in r.detail, r.detail
    assert "x its error against an fp64 ground truth" in r.detail, r.detail
    ev = r.evidence.precision
    assert ev["applied"] and ev["ratio"] > 20, ev


@pytest.mark.parametrize("changes", [{"precision": "tolerance"}, {"guard_policy": "paper"}], ids=["tolerance", "paper"])
def test_tolerance_only_keeps_the_old_behaviour(matmul_task, build_pool, changes):
    r = _score(matmul_task, ATTACK, build_pool, **changes)
    assert r.verdict is Verdict.OK and r.speedup is not None, (r.verdict, r.detail)
    ev = r.evidence.precision
    assert ev["applied"] is False and "tolerance only" in ev["note"], ev
    assert r.evidence.worst_error["rel_l2_error"] < 1e-4  # the strict tolerance alone lets it through


@pytest.mark.parametrize("name", ["cand_matmul_same.py", "cand_matmul_split_k.py", "cand_matmul_reversed_k.py"])
def test_the_reference_and_honest_reorderings_pass(matmul_task, build_pool, name):
    r = _score(matmul_task, DATA / name, build_pool)
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    ev = r.evidence.precision
    assert ev["applied"] and ev["rounds"] == 8 and ev["widened_rounds"] == 4 and ev["widened_inputs"] == [0, 1], ev
    assert ev["k"] == 2.0 and ev["floor"] == pytest.approx(F32_FLOOR) and ev["ground_truth_device"] == "cpu"
    assert {(o["group"], o["rounds"]) for o in ev["outputs"]} == {("task", 4), ("widened", 4)}
    for o in ev["outputs"]:
        assert o["ok"] and 0 < o["ref_error"] < 1e-6 and o["cand_error"] <= 1.2 * o["ref_error"], o
    if name == "cand_matmul_same.py":
        assert ev["ratio"] == 1.0 and ev["ref_error"] == ev["cand_error"]


def test_a_half_precision_task_is_gated_against_its_own_reference_with_k_3(build_pool):
    r = _score(as_task(str(DATA / "task_matmul_half.py")), DATA / "cand_matmul_same.py", build_pool)
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    ev = r.evidence.precision
    assert ev["applied"] and ev["k"] == 3.0 and ev["floor"] == pytest.approx(4 * 2.0**-11), ev
    assert all(o["dtype"] == "float16" and o["k"] == 3.0 for o in ev["outputs"]) and ev["ratio"] == 1.0


def test_integer_outputs_skip_the_gate_with_a_note(build_pool):
    r = _score(as_task(str(DATA / "task_argmax.py")), DATA / "cand_argmax_same.py", build_pool)
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    ev = r.evidence.precision
    assert ev["applied"] is False and "int64" in ev["note"] and "compared exactly" in ev["note"], ev


# --- on a GPU (pytest -m gpu) ---------------------------------------------------------------------

GPU_CONFIG = ScoreConfig(device="cuda", num_correctness_inputs=30, timing_budget_s=2.0, min_timed_rounds=21,
                         reverify_above=0)
GPU_ATTACKS = Path(__file__).parent / "adversarial" / "gpu"


@pytest.fixture(scope="module")
def gpu_matmul_task():
    return as_task(str(DATA / "gpu" / "task_matmul_4096.py"))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["tf32_matmul.py", "bf16_matmul.py"])
def test_gpu_reduced_precision_is_refused_and_was_paid_under_tolerance_only(gpu_matmul_task, build_pool, name):
    r = score(gpu_matmul_task, as_candidate(str(GPU_ATTACKS / name)), GPU_CONFIG, build_pool=build_pool)
    assert r.verdict is Verdict.INCORRECT and "less precise than the reference: " in r.detail, (r.verdict, r.detail)
    assert r.evidence.precision["ground_truth_device"].startswith("cuda"), r.evidence.precision
    old = score(gpu_matmul_task, as_candidate(str(GPU_ATTACKS / name)), GPU_CONFIG.replace(precision="tolerance"),
                build_pool=build_pool)
    assert old.verdict is Verdict.OK and old.speedup > 1.2, (old.verdict, old.speedup, old.detail)


@pytest.mark.gpu
def test_gpu_reference_copy_passes_with_ratio_one_and_a_roofline_against_the_cards_peaks(gpu_matmul_task, build_pool):
    r = score(gpu_matmul_task, as_candidate(str(DATA / "cand_matmul_same.py")), GPU_CONFIG, build_pool=build_pool)
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    ev = r.evidence.precision
    assert ev["applied"] and ev["ratio"] == 1.0 and ev["rounds"] == 8 and ev["widened_rounds"] == 4, ev
    rl = r.evidence.roofline
    assert rl["flops"] == 2 * 4096**3 and rl["peaks"]["dram_bytes_s"], rl
    name = r.evidence.device_name
    if rl["peaks"]["table"] is not None:  # an H100, H200 or A100
        assert 0 < rl["ref"]["flop_fraction"] <= 1.05 and 0 < rl["cand"]["byte_fraction"] <= 1.05, rl
    else:
        assert rl["peaks"]["flops_per_s"] is None and name in rl["peaks"]["note"], rl
