#!/usr/bin/env bash
# Full-size KernelBench on the GPU host, in one call (< 8 minutes on one H100; logs and tables under $OUT):
#   1. the level 1-3 scan of the checkout carried in as .kb/ (load, memory plan, reference time, lint);
#   2. a batch run of every built-in CUDA variant with --baseline compile (torch.compile of each task).
# Usage: OUT=/path bash scripts/gpu_kernelbench_scan.sh [scan seconds] [batch seconds]
set -uo pipefail
scan_s=${1:-270}
batch_s=${2:-170}
KB=${KB:-$PWD/.kb}
source scripts/gpu_env.sh
export EVALFARM_CACHE_DIR=/tmp/evalfarm-cache
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free --format=csv | tee "$OUT/gpu.txt"
cat "$KB/UPSTREAM_COMMIT" 2>/dev/null | tee "$OUT/kernelbench_commit.txt"

# 1. The scan: each task in its own process, 12 s at most each, the whole scan bounded.
timeout $((scan_s + 30)) python3 scripts/kernelbench_scan.py --root "$KB" --device cuda --levels 1,2,3 \
  --task-timeout 12 --total-timeout "$scan_s" --out "$OUT/scan.jsonl" --summary "$OUT/scan.md" \
  > "$OUT/scan.log" 2>&1
echo "== scan (levels 1-3) =="; cat "$OUT/scan.md" | head -40

# 2. Every built-in CUDA variant, with the torch.compile baseline of its task.
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
echo "== batch summary =="; cat "$OUT/variants.md" 2>/dev/null; tail -5 "$OUT/variants.log"
