#!/usr/bin/env bash
# The sandbox on the GPU host, in one call of under 10 minutes (logs under $OUT, a summary last):
#   1. which part of bubblewrap stops a CUDA worker attaching the judge's arena
#      (benchmarks/probes/gpu_bwrap_ipc_probe.py: the worker's command line and one-difference variants);
#   2. the sandbox, seccomp, cgroup and GPU attack tests with bubblewrap on PATH in its default
#      mode (builds inside bubblewrap; GPU workers too where the daemon is root and workers change
#      uid, with the /dev/shm hand-over, else in the built-in sandbox);
#   3. the sandbox's cost per candidate: bubblewrap, the built-in fallback and none, side by side.
#   bash benchmarks/gpu_sandbox.sh [repeats=1]
# Carry bubblewrap where the host lacks it: .bin/bwrap (a folder .git/info/exclude ignores; a
# wrapper that runs the carried binary with its carried libraries where the host's do not load).
set -uo pipefail
repeats=${1:-1}
source benchmarks/gpu_env.sh
export EVALFARM_CACHE_DIR=/tmp/evalfarm-cache
if ! command -v bwrap >/dev/null 2>&1 && [[ -x .bin/bwrap ]]; then
  export PATH=$PWD/.bin:$PATH
fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; command -v bwrap && bwrap --version; } | tee "$OUT/sandbox_host.txt"
timeout 150 python3 benchmarks/probes/gpu_bwrap_ipc_probe.py --out "$OUT/ipc_probe.json" 2>&1 | tee "$OUT/ipc_probe.log"
rc=0
timeout 270 python3 -m pytest -v -rfE -p no:cacheprovider -m "gpu or not gpu" tests/test_bubblewrap.py \
  tests/adversarial/test_seccomp.py tests/adversarial/test_cgroup.py tests/adversarial/test_gpu_runtime_attacks.py \
  tests/adversarial/test_gpu_attacks.py 2>&1 | tee "$OUT/sandbox_tests.log" | tail -n 15
rc=${PIPESTATUS[0]}
timeout 150 python3 benchmarks/bench_sandbox_cost.py --device cuda --inputs 1000 --budget 10 --repeats "$repeats" \
  > "$OUT/sandbox_cost.log" 2>&1
echo "== summary"
grep -E "ATTACHED|failed  " "$OUT/ipc_probe.log"
tail -n 2 "$OUT/sandbox_tests.log"
grep -A 8 "median seconds" "$OUT/sandbox_cost.log" || tail -n 8 "$OUT/sandbox_cost.log"
exit $rc
