"""The built-in task suite: structure, and that its shipped variants behave as labelled.

Fast tests run every task at its "small" profile on CPU with every pure-PyTorch variant:
'fast' variants must pass the strict comparison on three random inputs and 'wrong' variants
must fail it on every one. The C++ ('cpu') variants compile extensions and are marked slow.
"""

from __future__ import annotations

import ast
import re

import pytest
import torch

from evalfarm.compare import compare_outputs
from evalfarm.tasks import builtin_suite, instantiate_task
from evalfarm.tasks.format import exec_module

SUITE = builtin_suite()
KEYS = [e.task_id for e in SUITE.entries]
INPUT_SEEDS = (11, 2024, 777)
INIT_SEED = 1234

ANY_VARIANTS = [(k, v) for k in KEYS for v in SUITE.variants(k) if v.devices == "any"]
CPU_VARIANTS = [(k, v) for k in KEYS for v in SUITE.variants(k) if v.devices == "cpu"]
# cpu variants that compile a C++ extension are slow to build; pure-PyTorch ones run with the rest
BUILT_CPU_VARIANTS = [(k, v) for k, v in CPU_VARIANTS if "load_inline" in v.path.read_text()]
PLAIN_CPU_VARIANTS = [(k, v) for k, v in CPU_VARIANTS if (k, v) not in BUILT_CPU_VARIANTS]
CUDA_VARIANTS = [(k, v) for k in KEYS for v in SUITE.variants(k) if v.devices == "cuda"]


def _vid(item):
    key, variant = item
    return f"{key}:{variant.path.stem}"


def test_suite_size_and_levels():
    levels = {}
    for e in SUITE.entries:
        levels.setdefault(e.level, []).append(e)
    assert len(SUITE.entries) >= 24
    assert sorted(levels) == [1, 2, 3]
    for level, entries in levels.items():
        assert len(entries) >= 8, f"level {level} has only {len(entries)} tasks"
        numbers = [e.number for e in entries]
        assert numbers == list(range(1, len(entries) + 1)), f"level {level} ids not 1..n: {numbers}"
    names = [e.name.lower() for e in SUITE.entries]
    assert len(set(names)) == len(names), "task names must be unique (they are lookup keys)"


@pytest.mark.parametrize("key", KEYS)
def test_task_parses_and_has_variants(key):
    task = SUITE.load(key)
    assert "small" in task.size_profiles
    assert SUITE.find(key).name.lower() == SUITE.find(SUITE.find(key).name).name.lower()
    tree = ast.parse(task.source)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    assert ast.get_docstring(model), "class Model needs a docstring saying what it computes"
    # get_inputs must not pin a device: the farm creates inputs under a default-device context.
    get_inputs = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs")
    src = ast.get_source_segment(task.source, get_inputs) or ""
    assert "device" not in src and ".cuda(" not in src and ".to(" not in src
    variants = SUITE.variants(key)
    assert any(v.kind == "fast" and v.runs_on("cpu") for v in variants), "needs a CPU-runnable fast variant"
    assert any(v.kind == "wrong" and v.devices == "any" for v in variants), "needs a wrong_any variant"
    for v in variants:
        cand = v.load()
        ctree = ast.parse(cand.source)
        top = {n.name for n in ctree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        assert "ModelNew" in top and "get_inputs" not in top and "Model" not in top


def test_variant_files_are_all_recognised():
    root = SUITE.root / "variants"
    stems = {(e.level, e.stem) for e in SUITE.entries}
    pattern = re.compile(r"^(fast|wrong)_(any|cpu|cuda)_[a-z0-9_]+\.py$")
    for d in sorted(root.glob("level*/*")):
        assert (int(d.parent.name[5:]), d.name) in stems, f"variant dir without a task: {d}"
        for f in d.glob("*.py"):
            assert pattern.match(f.name), f"badly named variant: {f}"
    assert len(CUDA_VARIANTS) >= 6
    for _, v in CUDA_VARIANTS:
        src = v.path.read_text()
        compile(src, str(v.path), "exec")
        assert "load_inline" in src and "getCurrentCUDAStream" in src


@pytest.mark.parametrize("key", KEYS)
def test_default_profile_is_gpu_sized(key):
    """The default sizes build (on the meta device, no memory) and are large enough for a GPU."""
    module = instantiate_task(SUITE.load(key), "default")
    with torch.device("meta"):
        inputs = module.get_inputs()
    total = sum(t.numel() for t in inputs)
    assert 2**16 <= total <= 2**28, f"{key}: {total} input elements"


def _run_pair(key, variant, profile="small"):
    """(ok flags of the strict comparison, one per input seed) for a variant against the task."""
    task = SUITE.load(key)
    module = instantiate_task(task, profile)
    cand = variant.load()
    cmod = exec_module(cand.source, f"builtin_variant_{cand.sha256[:16]}", str(variant.path))
    init = module.get_init_inputs()
    torch.manual_seed(INIT_SEED)
    ref_model = module.Model(*init)
    torch.manual_seed(INIT_SEED)
    new_model = cmod.ModelNew(*init)
    ref_state, new_state = ref_model.state_dict(), new_model.state_dict()
    assert list(ref_state) == list(new_state)
    for name, value in ref_state.items():
        assert torch.equal(value, new_state[name]), f"parameter {name} differs"
    results = []
    with torch.no_grad():
        for seed in INPUT_SEEDS:
            torch.manual_seed(seed)
            inputs = module.get_inputs()
            ref = ref_model(*inputs)
            out = new_model(*inputs)
            results.append(compare_outputs(out, ref, "strict"))
    return results


def _check_labelled(key, variant):
    results = _run_pair(key, variant)
    if variant.kind == "fast":
        for c in results:
            assert c.ok, f"{key} {variant.label}: {c.reason}"
            assert c.rel_l2_error < 1e-5, f"{key} {variant.label}: small margin, rel L2 {c.rel_l2_error:.3g}"
    else:
        for c in results:
            assert not c.ok, f"{key} {variant.label} passes the strict comparison"
            # a clear margin: far beyond the float32 relative L2 bound, or an elementwise failure
            assert c.rel_l2_error > 1e-3 or "element" in c.reason, c.reason


@pytest.mark.parametrize("item", ANY_VARIANTS + PLAIN_CPU_VARIANTS, ids=_vid)
def test_variant_behaves_as_labelled(item):
    _check_labelled(*item)


def test_suite_has_compiled_cpu_variants():
    assert len(BUILT_CPU_VARIANTS) >= 4


@pytest.mark.slow
@pytest.mark.long  # each builds a C++ extension: 20-25 s on a 2-core machine (make test-long)
@pytest.mark.parametrize("item", BUILT_CPU_VARIANTS, ids=_vid)
def test_compiled_cpu_variant_behaves_as_labelled(item):
    """Builds the C++/OpenMP extension (about 30-60 s each on a 2-core machine)."""
    _check_labelled(*item)


def test_wrong_comparison_catches_a_planted_error():
    """Guard the harness itself: a fast variant's output with one element perturbed must fail."""
    key, variant = next((k, v) for k, v in ANY_VARIANTS if v.kind == "fast")
    task = SUITE.load(key)
    module = instantiate_task(task, "small")
    torch.manual_seed(0)
    inputs = module.get_inputs()
    torch.manual_seed(0)
    ref = module.Model(*module.get_init_inputs())(*inputs)
    bad = ref.clone()
    bad.view(-1)[0] += 10 * float(ref.abs().max()) + 1.0
    assert not compare_outputs(bad, ref, "strict").ok
