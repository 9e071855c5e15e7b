#!/usr/bin/env bash
# The daemon benchmark on the GPU host (docs/benchmarks.md, "Daemon benchmark"), in one call:
#   OUT=/path bash scripts/gpu_bench_daemon.sh [candidates=200] [group=8] [limit seconds=540]
# A local daemon with every GPU (one slot each) scores the stream with 1000 correctness inputs and
# a 10 s timing budget; bench_daemon.{json,md} and the daemon's log go to $OUT.
set -uo pipefail
n=${1:-200}
g=${2:-8}
limit=${3:-540}
source scripts/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/gpu.txt"
timeout "$limit" python3 -m evalfarm.bench_daemon --device cuda --candidates "$n" --group "$g" \
  --rescore 5 --repeats 5 --out "$OUT" > "$OUT/bench_daemon.log" 2>&1
echo "bench-daemon exit code: $?" | tee -a "$OUT/gpu.txt"
cat "$OUT/bench_daemon.md" 2>/dev/null || tail -n 30 "$OUT/bench_daemon.log"
