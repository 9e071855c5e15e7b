#!/usr/bin/env bash
# The rollout's decode step against the rows one GPU holds, under XLA flag variants, one process
# each (learner.bench.decode_rows; docs/benchmarks.md, "Several GPUs of one host"):
#   OUT=/path bash benchmarks/gpu_decode_rows.sh [limit seconds per variant=150]
# Variants: steps_per_check 1 and 8, each with XLA's defaults and with the decode loop's while
# loop and conditionals recorded into CUDA graphs (command buffers: the loop runs on the device).
set -uo pipefail
cd "$(dirname "$0")/.."
limit=${1:-150}
OUT="${OUT:-bench-out}"
source benchmarks/gpu_env.sh
out="$OUT/decode_rows.jsonl"
graphs="--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL"
for variant in "1|" "8|" "1|$graphs" "8|$graphs"; do
  k=${variant%%|*}; flags=${variant#*|}
  echo "== steps_per_check=$k XLA_FLAGS='$flags' ($(date -u +%T))"
  XLA_FLAGS="$flags" timeout "$limit" python3 -m learner.bench.decode_rows --suite "${SUITE:-1.5b}" \
    --steps-per-check "$k" --out "$out" 2>>"$OUT/decode_rows.log" || echo "variant exit code $?"
done
