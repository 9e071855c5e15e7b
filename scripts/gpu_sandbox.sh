#!/usr/bin/env bash
# The sandbox on the GPU host: bubblewrap (carried as .bin/bwrap when the host lacks it) and the
# seccomp filter around CUDA workers. Runs the sandbox tests, the GPU attack tests and the honest
# GPU tests under bubblewrap, the fault drill on cuda, and the sandbox's cost per candidate with
# bubblewrap, the built-in fallback and none, side by side.
#   bash scripts/gpu_sandbox.sh [repeats=5]
# Carry: cp /usr/bin/bwrap .bin/ (a folder .git/info/exclude ignores) and name .bin in carry.
set -uo pipefail
repeats=${1:-5}
source scripts/gpu_env.sh
if ! command -v bwrap >/dev/null 2>&1 && [[ -x .bin/bwrap ]]; then
  export PATH=$PWD/.bin:$PATH
fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; command -v bwrap && bwrap --version; } | tee "$OUT/sandbox_host.txt"
python3 -c "from evalfarm import bubblewrap; print('bubblewrap selected:', bubblewrap.selected())" | tee -a "$OUT/sandbox_host.txt"
rc=0
EVALFARM_SANDBOX=bubblewrap timeout 480 python3 -m pytest -q -p no:cacheprovider tests/test_bubblewrap.py \
  tests/adversarial/test_seccomp.py tests/adversarial/test_gpu_runtime_attacks.py -m "gpu or not gpu" 2>&1 | tee "$OUT/sandbox_tests.log"
rc=${PIPESTATUS[0]}
EVALFARM_SANDBOX=bubblewrap timeout 420 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py 2>&1 | tee "$OUT/sandbox_gpu_tests.log"
[[ ${PIPESTATUS[0]} == 0 ]] || rc=1
EVALFARM_SANDBOX=bubblewrap timeout 420 python3 -m evalfarm.drill --device cuda --inputs 100 --budget 2 --out "$OUT/drill" 2>&1 | tee "$OUT/sandbox_drill.log"
timeout 540 python3 scripts/bench_sandbox_cost.py --device cuda --inputs 1000 --budget 10 --repeats "$repeats" \
  2>&1 | tee "$OUT/sandbox_cost.log"
echo "== summary"
tail -n 3 "$OUT/sandbox_tests.log" "$OUT/sandbox_gpu_tests.log" "$OUT/sandbox_drill.log" 2>/dev/null
grep -A 8 "median seconds" "$OUT/sandbox_cost.log"
exit $rc
