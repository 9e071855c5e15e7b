"""The evidence on a candidate's own extensions (evalfarm.judge.extension_facts): which kernels
are its own, by the names its built .so files define. The profiled call itself needs a GPU
(tests/test_gpu.py); here its report is given."""

from __future__ import annotations

from evalfarm.build import BuildPool
from evalfarm.judge import extension_facts as ef
from tests.tiny_extension import python_module

# A template function instantiated for float (demangled with its return type, as a template
# kernel's name is), a plain one, and a static one (a local symbol: .symtab only).
PRELUDE = """
template <typename T> void evalfarm_scale_kernel(T* x, int n) { for (int i = 0; i < n; ++i) x[i] *= 2; }
template void evalfarm_scale_kernel<float>(float*, int);
void evalfarm_plain_kernel(float* x, int n) { evalfarm_scale_kernel<float>(x, n); }
__attribute__((used)) static void evalfarm_local_kernel(float* x) { x[0] = 0; }
"""
SOURCE = python_module({"twice": "return PyLong_FromLong(2 * PyLong_AsLong(arg));"}, prelude=PRELUDE)


def test_kernels_of_its_own_extensions_are_told_from_torchs(tmp_path):
    src = ("from torch.utils.cpp_extension import load_inline\n"
           f"m = load_inline(name='evalfarm_test_kernel_names', cpp_sources={SOURCE!r}, no_implicit_headers=True)\n")
    with BuildPool(max_workers=1, cache_dir=tmp_path) as pool:
        report = pool.build(src, "cpu")
    assert report.status == "ok", report.log
    own, note = ef.own_kernel_names([report.extensions[0]["so_path"]])
    assert note == ""
    reply = {"op": "kernels", "kernels": [
        ["void evalfarm_scale_kernel<float>(float*, int)", 30.0],
        ["evalfarm_plain_kernel(float*, int)", 10.0],
        ["evalfarm_local_kernel(float*)", 5.0],
        ["void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
         "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", 40.0],
        ["Memcpy DtoD (Device -> Device)", 15.0],
    ]}
    share = ef.kernel_share(reply, own)
    assert share["measured"] is True and share["total_us"] == 100.0 and share["own_us"] == 45.0
    assert share["own_fraction"] == 0.45
    assert [k["own"] for k in share["kernels"]] == [True, True, True, False, False]


def test_a_bad_or_missing_report_is_a_note():
    assert ef.kernel_share({"op": "kernels_failed", "detail": "boom"}, set()) == {
        "measured": False, "note": "the profiled call failed: boom"}
    assert ef.kernel_share(None, set())["measured"] is False
    # Malformed entries are dropped, not trusted.
    share = ef.kernel_share({"op": "kernels", "kernels": [["k", -1], [3, 2.0], ["k2", 4.0], "x"]}, {"k2"})
    assert share["total_us"] == 4.0 and share["own_fraction"] == 1.0
    assert ef.kernel_share({"op": "kernels", "kernels": []}, set())["measured"] is False


def test_profile_kernels_without_cuda_profiles_nothing():
    calls = []
    assert ef.profile_kernels(lambda *a: calls.append(a), [1], lambda: None, is_cuda=False) == []
    assert calls == []


def test_worker_build_failures_are_checked_and_cut():
    value = [{"name": "n" * 500, "key": "k" * 100, "recorded": True, "log": "ignored"},
             {"name": "own", "key": "a" * 64, "recorded": False, "log": "x" * 10_000}, "junk"]
    out = ef.worker_build_failures(value)
    assert out[0] == {"name": "n" * 200, "key": "k" * 64, "recorded": True}
    assert out[1]["recorded"] is False and len(out[1]["log"]) == 4000
    assert len(out) == 2 and ef.worker_build_failures("junk") == []
