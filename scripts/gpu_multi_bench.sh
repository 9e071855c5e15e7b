#!/usr/bin/env bash
# The multi-GPU run on one host with several GPUs (docs/benchmarks.md, "Several GPUs of one host"):
#   OUT=/path bash scripts/gpu_multi_bench.sh [parts=scaling,big,parity,farm] [limit seconds per part=540]
# Parts (each under its own `timeout`, so a slow one cannot eat the others' time):
#   scaling  learner.bench_scaling run on 1 GPU, then on all GPUs (same global batch: a random
#            Qwen2.5-1.5B-shaped model, an RL step at G=16 with micro-batching, and the training
#            step at sequence 4096), then the table: seconds per step by phase, rollout tokens/s,
#            training MFU per GPU and the scaling efficiency (targets: >= 90% on 2-4, >= 85% on 8).
#   big      a 7B Qwen2-shaped policy (random init) on all GPUs at configs/gpu_cluster.py's sizes:
#            the memory plan, one SFT step and one RL step, the measured peak per GPU beside it.
#   parity   two micro-batched training steps and greedy generation on a sharded mesh of all
#            GPUs equal those on one GPU (float32, highest matmul precision).
#   farm     a local evalfarm daemon with one slot per GPU (--gpus all) scoring a stream of built-in
#            CUDA variants (1000 inputs, 10 s budget) while no learner runs: candidates per minute
#            per GPU, and the GPU model the client routes by.
# Everything lands flat in $OUT (the device tool brings back at most 8 files): table.md holds every
# part's table, multi.log the logs.
set -uo pipefail
cd "$(dirname "$0")/.."
parts=${1:-scaling,big,parity,farm}
limit=${2:-540}
OUT="${OUT:-bench-out}"
mkdir -p "$OUT"
source scripts/gpu_env.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}"
log="$OUT/multi.log"
table="$OUT/table.md"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee -a "$log"
ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
echo "# Multi-GPU run: $ngpu x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)" >>"$table"
has() { [[ ",$parts," == *",$1,"* ]]; }
rc=0
if has scaling; then
  for n in 1 all; do  # one process per device count: peaks of device memory are per process
    timeout "$limit" python3 -m learner.bench_scaling run --devices "$n" --suite 1.5b --out-dir "$OUT" \
      >>"$log" 2>&1 || { echo "scaling --devices $n exit code $?" | tee -a "$log"; rc=1; }
  done
  { echo; echo "## Scaling"; echo; python3 -m learner.bench_scaling compare --out-dir "$OUT"; } >>"$table" 2>>"$log"
fi
if has big; then
  timeout "$limit" python3 -m learner.bench_scaling big --config configs/gpu_cluster.py --model qwen2.5-7b \
    --devices all --out-dir "$OUT" >"$OUT/big.txt" 2>>"$log" || { echo "big exit code $?" | tee -a "$log"; rc=1; }
  { echo; echo "## 7B at configs/gpu_cluster.py sizes"; echo; sed -n '/^| measurement/,$p' "$OUT/big.txt";
    echo; echo '```'; sed -n '1,/total/p' "$OUT/big.txt"; echo '```'; } >>"$table"
fi
if has parity; then
  timeout "$limit" python3 -m learner.bench_scaling parity --devices all >"$OUT/parity.txt" 2>>"$log"
  prc=$?
  { echo; echo "## Sharded equals one GPU (exit code $prc)"; echo; grep -E "^PARITY|Error" "$OUT/parity.txt" | head -5; } >>"$table"
  [[ $prc == 0 ]] || rc=1
fi
if has farm; then
  mkdir -p "$OUT/farm"
  timeout "$limit" python3 -m evalfarm.bench_daemon --device cuda --candidates $((ngpu * 24)) --group 8 \
    --rescore 0 --out "$OUT/farm" >>"$log" 2>&1 || echo "bench_daemon exit code $?" | tee -a "$log"
  { echo; echo "## Farm, one slot per GPU"; echo; cat "$OUT/farm/bench_daemon.md" 2>/dev/null; } >>"$table"
  cp "$OUT/farm/bench_daemon.json" "$OUT/farm.json" 2>/dev/null
  rm -rf "$OUT/farm"
fi
cat "$table"
exit $rc
