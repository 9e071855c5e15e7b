#!/usr/bin/env bash
# All GPU work of a session in one call: environment, GPU tests, then benchmarks.
#   bash benchmarks/gpu_session.sh [farm-tests|farm-bench|learner-bench|learner-demo|all] [seconds]
# Logs go to $OUT (or ./gpu-out); the last lines printed are the summary tables.
set -uo pipefail
what=${1:-all}
bench_seconds=${2:-300}
source benchmarks/gpu_env.sh
export EVALFARM_CACHE_DIR=/tmp/evalfarm-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])" | tee -a "$OUT/gpu.txt"
rc=0
if [[ $what == farm-tests || $what == all ]]; then
  timeout 420 python3 -m pytest -m gpu tests/test_gpu.py -v -s -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log"
  rc=${PIPESTATUS[0]}
fi
if [[ $what == farm-bench || $what == all ]]; then
  python3 -m evalfarm.bench --device cuda --repeats 5 --max-seconds "$bench_seconds" --out "$OUT/farm_bench.json" \
    2>"$OUT/farm_bench.err" | tee "$OUT/farm_bench.txt"
fi
if [[ $what == learner-demo ]]; then
  # The README's main job on a GPU host: JAX on the GPU, a local farm daemon scoring on it.
  timeout "$bench_seconds" python3 -m learner train --config configs/demo.py --config.workdir="$OUT/demo" \
    --config.progress=False 2>&1 | tee "$OUT/learner_demo.log"
  rc=${PIPESTATUS[0]}
  cat "$OUT/demo/report.txt" 2>/dev/null
fi
if [[ $what == learner-bench ]]; then
  timeout "$bench_seconds" python3 -m learner.bench.throughput --out "$OUT/learner_bench.json" 2>&1 | tee "$OUT/learner_bench.log"
fi
echo "== summary"; tail -n 12 "$OUT/gpu_tests.log" 2>/dev/null | grep -E "passed|failed|error" ; cat "$OUT/farm_bench.txt" 2>/dev/null | tail -n 16
exit $rc
