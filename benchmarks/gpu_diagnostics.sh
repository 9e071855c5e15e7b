#!/usr/bin/env bash
# `evalfarm score` diagnostics and unseen sizes on the GPU host, in one call (< 5 minutes on one
# H100; logs, JSON results and a summary table under $OUT):
#   1. --profile on a built-in CUDA variant: the torch profiler trace (CUDA kernels in it) and an
#      Nsight Compute report where ncu is on PATH (profile.json says why not otherwise);
#   2. --save-failing-input on a wrong variant: the judge's files load, and show the difference;
#   3. every built-in CUDA variant with --require-other-sizes (scored at the default sizes on the
#      GPU, re-checked at the task's "small" profile): evidence.other_sizes per sample.
# Usage: OUT=/path bash benchmarks/gpu_diagnostics.sh
set -uo pipefail
source benchmarks/gpu_env.sh
export EVALFARM_CACHE_DIR=/tmp/evalfarm-cache
V=evalfarm/tasks/builtin/variants
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; command -v ncu && ncu --version; } \
  > "$OUT/host.txt" 2>&1
cat "$OUT/host.txt"

# 1. --profile (the first build of the extension happens here too).
timeout 240 python3 -m evalfarm score --task L1/3 --candidate "$V/level1/3_RMSNorm/fast_cuda_channel_loop.py" \
  --device cuda --inputs 100 --budget 2 --json --profile "$OUT/profile" > "$OUT/profile_result.json" \
  2> "$OUT/profile.log"
echo "profile exit code: $?" | tee -a "$OUT/profile.log"

# 2. --save-failing-input.
timeout 120 python3 -m evalfarm score --task L1/3 --candidate "$V/level1/3_RMSNorm/wrong_any_divides_by_c_minus_1.py" \
  --device cuda --inputs 100 --budget 2 --json --save-failing-input "$OUT/failing" > "$OUT/failing_result.json" \
  2> "$OUT/failing.log"
echo "failing-input exit code: $?" | tee -a "$OUT/failing.log"

# 3. Every built-in CUDA variant with --require-other-sizes (a killed batch keeps its finished rows).
python3 scripts/cuda_variants_jsonl.py "$OUT/variants.jsonl"
timeout 150 python3 -m evalfarm score --candidates "$OUT/variants.jsonl" --out "$OUT/other_sizes.jsonl" \
  --device cuda --inputs 100 --budget 2 --require-other-sizes > "$OUT/other_sizes.log" 2>&1
echo "batch exit code: $?" | tee -a "$OUT/other_sizes.log"

python3 - "$OUT" <<'PY' | tee "$OUT/summary.md"
import json, os, sys
import torch
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except (OSError, ValueError) as err:
        return {"verdict": f"no result ({err})", "evidence": {}}
p = load("profile_result.json")
prof = p.get("evidence", {}).get("diagnostics", {}).get("profile", {})
kernels = 0
try:
    trace = json.load(open(os.path.join(out, "profile", "candidate_trace.json")))
    kernels = sum(1 for e in trace["traceEvents"] if e.get("cat") == "kernel")
except (OSError, ValueError, KeyError):
    pass
print("## --profile\n\n| verdict | speedup | files | CUDA kernel events in trace | ncu report | ncu note |\n|---|---|---|---|---|---|")
print(f"| {p.get('verdict')} | {p.get('speedup')} | {len(prof.get('files', []))} | {kernels} | {prof.get('ncu')} | "
      f"{prof.get('ncu_note') or prof.get('note', '')} |")
f = load("failing_result.json")
fi = f.get("evidence", {}).get("diagnostics", {}).get("failing_input", {})
loads = "-"
try:
    ref = torch.load(os.path.join(out, "failing", "reference_output.pt"))
    cand = torch.load(os.path.join(out, "failing", "candidate_output.pt"))
    loads = f"yes, max abs diff {max(float((a - b).abs().max()) for a, b in zip(ref, cand)):.3g}"
except Exception as err:  # noqa: BLE001
    loads = f"no: {err}"
print("\n## --save-failing-input\n\n| verdict | round | files load | reason |\n|---|---|---|---|")
print(f"| {f.get('verdict')} | {fi.get('correctness_round')} | {loads} | {str(fi.get('reason', ''))[:120]} |")
print("\n## --require-other-sizes (built-in CUDA variants)\n\n| sample | verdict | speedup | scored at | other profile | status | seconds |\n|---|---|---|---|---|---|---|")
try:
    rows = [json.loads(line) for line in open(os.path.join(out, "other_sizes.jsonl"))]
except OSError:
    rows = []
for r in rows:
    ev = r["result"]["evidence"]
    o = ev.get("other_sizes") or {}
    print(f"| {r['sample_id']} | {r['verdict']} | {r['speedup']} | {ev.get('size_profile')} | {o.get('profile')} | "
          f"{o.get('status')} | {o.get('seconds', 0):.1f} |")
PY
