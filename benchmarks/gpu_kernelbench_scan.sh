#!/usr/bin/env bash
# Full-size KernelBench on the GPU host (logs and tables under $OUT):
#   1. the scan of the checkout carried in as .kb/ (load, memory plan, reference time, lint), one
#      long-lived lint process for all tasks (scripts/kernelbench_scan.py);
#   2. a batch run of every built-in CUDA variant with --baseline compile (torch.compile of each
#      task), every extension built ahead in parallel.
# Usage: OUT=/path bash benchmarks/gpu_kernelbench_scan.sh [scan seconds] [batch seconds] [levels]
#   scan seconds 0 skips the scan, batch seconds 0 the batch; levels is a comma list (default 1,2,3).
#   Split over calls of < 9 minutes each on one H100, e.g.:
#     OUT=$OUT bash benchmarks/gpu_kernelbench_scan.sh 450 0 1
#     OUT=$OUT bash benchmarks/gpu_kernelbench_scan.sh 450 0 2,3
#     OUT=$OUT bash benchmarks/gpu_kernelbench_scan.sh 0 450
#   SCAN_FROM=path/to/an/earlier/scan.jsonl (carried in) resumes that scan: its scanned tasks are kept.
set -uo pipefail
scan_s=${1:-270}
batch_s=${2:-170}
levels=${3:-1,2,3}
KB=${KB:-$PWD/.kb}
source benchmarks/gpu_env.sh
export EVALFARM_CACHE_DIR=/tmp/evalfarm-cache
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free --format=csv | tee "$OUT/gpu.txt"
cat "$KB/UPSTREAM_COMMIT" 2>/dev/null | tee "$OUT/kernelbench_commit.txt"

# 1. The scan: 30 s at most per task (the lint process's start-up not counted), the whole scan bounded.
if [ "$scan_s" -gt 0 ]; then
  tag=levels_${levels//,/_}
  resume=()
  if [ -n "${SCAN_FROM:-}" ]; then cp "$SCAN_FROM" "$OUT/scan_$tag.jsonl"; resume=(--resume); fi
  timeout $((scan_s + 60)) python3 scripts/kernelbench_scan.py --root "$KB" --device cuda --levels "$levels" \
    --task-timeout 30 --total-timeout "$scan_s" --out "$OUT/scan_$tag.jsonl" --summary "$OUT/scan_$tag.md" \
    "${resume[@]}" > "$OUT/scan_$tag.log" 2>&1
  echo "scan exit code: $?" | tee -a "$OUT/scan_$tag.log"
  echo "== scan (levels $levels) =="; head -60 "$OUT/scan_$tag.md"
  grep "child process start" "$OUT/scan_$tag.log"
fi

# 2. Every built-in CUDA variant, with the torch.compile baseline of its task.
if [ "$batch_s" -gt 0 ]; then
  python3 scripts/cuda_variants_jsonl.py "$OUT/variants.jsonl"
  timeout "$batch_s" python3 -m evalfarm score --candidates "$OUT/variants.jsonl" --out "$OUT/variants_results.jsonl" \
    --device cuda --baseline compile --inputs 100 --budget 2 \
    --table-md "$OUT/variants.md" --table-csv "$OUT/variants.csv" > "$OUT/variants.log" 2>&1
  echo "batch exit code: $?" | tee -a "$OUT/variants.log"
  # The per-sample table (a killed batch still has every finished row).
  python3 - "$OUT/variants_results.jsonl" <<'PY' | tee "$OUT/variants_samples.md"
import json, sys
print("| sample | verdict | speedup | torch.compile speedup | vs compile | ref us | cand us |")
print("|---|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    t = (r["result"]["evidence"].get("timing") or {})
    print(f"| {r['sample_id']} | {r['verdict']} | {r['speedup']} | {r.get('speedup_compile')} | "
          f"{r.get('speedup_vs_compile')} | {t.get('ref_time_us_median', 0):.1f} | {t.get('cand_time_us_median', 0):.1f} |")
PY
  echo "== batch summary =="; cat "$OUT/variants.md" 2>/dev/null; grep -i "building\|ahead" "$OUT/variants.log" | head -3
  tail -5 "$OUT/variants.log"
fi
