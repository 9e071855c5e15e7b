#!/usr/bin/env bash
# The learner-at-scale measurements on one GPU host (docs/benchmarks.md, "Learner at scale"):
#   1. the 7B memory plans for 8xH200 and a v5p-8 (shapes only, no GPU needed);
#   2. `learner.bench.throughput --suite h100`: a random Qwen2.5-1.5B-shaped model, an RL step at G=16
#      (8 prompts x 2k tokens, 2k-token responses, micro-batched; rollout / reference / update
#      seconds, rollout tokens/s, peak memory), decode at batch 256 / context 4k against the
#      measured-bandwidth HBM bound, and training MFU at sequence 4096 with micro-batching;
#   3. `learner.bench.rollout --suite 1.5b`: static batches against continuous batching, with the
#      decode loop's condition checked every step and every 8 steps (sampling.steps_per_check);
#   4. `benchmarks/mfu_sweep.py --variants remat_none_chunk4096`: the same training step without
#      rematerialisation and with 4096-token loss chunks, in a process of its own (it needs ~75 GB,
#      more than is left after the RL step of item 2): the setting that reaches 50% MFU on an H100.
# Logs, suite.json and suite.md (the table) go to $OUT (default ./bench-out). About 5-8 minutes
# on one H100; no network.
#
#   OUT=/tmp/out benchmarks/gpu_learner_bench.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}"

{
  JAX_PLATFORMS=cpu "$PY" -m learner.runtime.device_memory --model qwen2.5-7b --hardware h200 --devices 8 \
      --config configs/gpu_cluster.py
  JAX_PLATFORMS=cpu "$PY" -m learner.runtime.device_memory --model qwen2.5-7b --hardware v5p --devices 4 \
      --config configs/tpu_pod.py
} 2>&1 | tee "$OUT/device_memory.txt"

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv \
    > "$OUT/gpu.csv" 2>&1 || true
"$PY" -m learner.bench.throughput --suite h100 --out-dir "$OUT" 2>&1 | tee "$OUT/learner_bench.log"
rc=${PIPESTATUS[0]}
# The fused (cuDNN, row lengths) prefill against the masked one, on this GPU.
"$PY" -m pytest -q -m gpu tests/learner/test_prefill_attention.py -p no:cacheprovider > "$OUT/prefill_test.log" 2>&1
echo "fused prefill GPU test exit code $?" >> "$OUT/prefill_test.log"
# Static batches against continuous batching, one RL step's rollouts (docs/benchmarks.md).
"$PY" -m learner.bench.rollout --suite 1.5b --out "$OUT/rollout.json" > "$OUT/rollout.md" 2>"$OUT/rollout.log" \
    || echo "learner.bench.rollout exit code $?" >> "$OUT/rollout.md"
# The same with the decode loop's condition checked every 8 steps (sampling.steps_per_check).
"$PY" -m learner.bench.rollout --suite 1.5b --steps-per-check 8 --out "$OUT/rollout_check8.json" \
    > "$OUT/rollout_check8.md" 2>>"$OUT/rollout.log" || echo "learner.bench.rollout exit code $?" >> "$OUT/rollout_check8.md"
# The training step's best setting on an 80 GB card, alone in its process (docs/benchmarks.md).
"$PY" benchmarks/mfu_sweep.py --variants remat_none_chunk4096 --timeout 150 --out "$OUT/mfu_sweep.jsonl" \
    > "$OUT/mfu_sweep.md" 2>"$OUT/mfu_sweep.log" || echo "mfu_sweep exit code $?" >> "$OUT/mfu_sweep.md"
echo "== table ($OUT/suite.md) =="
cat "$OUT/suite.md" 2>/dev/null
tail -n 8 "$OUT/rollout.md"
tail -n 6 "$OUT/rollout_check8.md"
tail -n 3 "$OUT/prefill_test.log"
tail -n 3 "$OUT/mfu_sweep.md"
exit "$rc"
