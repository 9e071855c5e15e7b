#!/usr/bin/env bash
# The speed-mixture experiment on one GPU host (docs/experiments.md): one SFT + self-supervised
# base, then plain GRPO, random-exemplar and bucket-exemplar contrastive RL x 3 seeds, JAX on the
# GPU and a local farm daemon scoring on the same GPU. No network needed.
#   OUT=/some/dir bash benchmarks/gpu_method_experiment.sh [limit_seconds=450] [seeds=3]
# Writes $OUT/experiment.log, $OUT/report.{txt,md,json,png} and $OUT/table.md (the evidence and
# the per-arm table). When the limit is reached, the report covers the runs that finished.
set -uo pipefail
limit=${1:-450}
seeds=${2:-3}
source benchmarks/gpu_env.sh
export EVALFARM_CACHE_DIR=/tmp/evalfarm-cache
work=/tmp/speed-mixture
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
start=$(date +%s)
timeout "$limit" python3 -m learner experiment --config configs/speed_mixture.py --config.workdir="$work" \
  --config.experiment.seeds="$seeds" --config.progress=False >"$OUT/experiment.log" 2>&1
rc=$?
echo "experiment exit code $rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/gpu.txt"
python3 -m learner experiment --config configs/speed_mixture.py --config.workdir="$work" \
  --config.experiment.seeds="$seeds" --config.experiment.report_only=True >"$OUT/report.log" 2>&1
for ext in txt md json png; do cp "$work/report.$ext" "$OUT/" 2>/dev/null; done
cp "$work/base/report.txt" "$OUT/base_report.txt" 2>/dev/null
{
  echo "# Speed-mixture experiment ($(head -2 "$OUT/gpu.txt" | tail -1 | cut -d, -f1), exit code $rc)"
  echo
  sed -n '/### The two questions/,$p' "$OUT/report.md" 2>/dev/null
} >"$OUT/table.md"
tail -n 60 "$OUT/report.txt" 2>/dev/null
exit $rc
