#!/usr/bin/env bash
# Operator check on one GPU host (< 4 minutes on one H100): the daemon started from the
# documented systemd command line (deploy/systemd/evalfarm.service + farm.toml), 12 built-in
# candidates streamed through it with FarmClient while /metrics is scraped every second; the
# per-slot series must be present and agree with the results.
#   bash benchmarks/gpu_operator_check.sh [N]      logs, scrapes and operator_check.md under $OUT
set -uo pipefail
n=${1:-12}
source benchmarks/gpu_env.sh
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import pynvml" 2>/dev/null || echo "note: pynvml missing: the daemon warns (expected on a host without the farm extra)" | tee -a "$OUT/gpu.txt"
timeout 230 python3 benchmarks/gpu_operator_check.py --out "$OUT" -n "$n" --time-limit 180 2>&1 | tee "$OUT/operator_check.log"
rc=${PIPESTATUS[0]}
echo "== exit $rc"
exit $rc
