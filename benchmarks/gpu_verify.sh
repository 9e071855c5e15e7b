#!/usr/bin/env bash
# The reward-fidelity and deployment checks on a GPU host, stage by stage, each under its own
# time limit (logs under $OUT, each stage's short table printed last):
#
#   bash benchmarks/gpu_verify.sh smoke:400 precision:90 tests:300
#   bash benchmarks/gpu_verify.sh fidelity:560
#   bash benchmarks/gpu_verify.sh attacks:250 corpus:300
#
#   smoke:     deploy/smoke.sh host --device cuda: the daemon as the systemd unit runs it, the
#              built-in fast and wrong variants, the hostile-tenant drill (the host has no docker)
#   precision: benchmarks/precision_calibration.py on the card: honest and TF32/bf16 matmul variants
#              and the honest corpus's kernels, their error against a float64 ground truth
#   tests:     every `-m gpu` test but the honest corpus's (the corpus stage scores those kernels),
#              WORKERS (default 4) at a time; evaluations still take turns on the GPU
#   fidelity:  benchmarks/timing_fidelity.py: the farm's times under both timing protocols beside a
#              one-process do_bench-style measurement (TASKS, KB: task lists; INPUTS, BUDGET;
#              PROTOCOLS; REPEATS: farm evaluations per candidate; CHUNKS: one-process chunks)
#   drift:     benchmarks/probes/drift_probe.py: an identical copy in one process, memory reused per call
#              (fresh) and placed anew per call (placed), 3 repeats (DRIFT_TASK, DRIFT_MODES, ...)
#   attacks:   scripts/attack_sweep.py --device cuda (STATIC=on|off|both, default off)
#   corpus:    scripts/honest_sweep.py --device cuda (STATIC, default off)
#
# Bubblewrap is taken from .bin/ where the host lacks it; the KernelBench tasks from .kb/ (copies
# of ../shared/kernelbench, in folders .git/info/exclude ignores).
set -uo pipefail
source benchmarks/gpu_env.sh
export EVALFARM_CACHE_DIR=${EVALFARM_CACHE_DIR:-/tmp/evalfarm-cache}
if ! command -v bwrap >/dev/null 2>&1 && [[ -x .bin/bwrap ]]; then export PATH=$PWD/.bin:$PATH; fi
kb_root=${KB_ROOT:-.kb/KernelBench}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
summaries=()

run_stage() {  # name seconds
  local name=$1 secs=$2 t0=$SECONDS rc=0
  echo "=== $name (limit ${secs}s) ==="
  case $name in
    smoke)
      SMOKE_DIR=/tmp/evalfarm-smoke EVALFARM_PYTHON=python3 timeout "$secs" bash deploy/smoke.sh host --device cuda \
        > "$OUT/smoke.log" 2>&1 || rc=$?
      tail -n 25 "$OUT/smoke.log" ;;
    precision)
      # PRECISION_ARGS="--no-matmul": only the honest corpus's kernels
      timeout "$secs" python3 benchmarks/precision_calibration.py --device cuda --corpus --sizes 1024,4096 ${PRECISION_ARGS:-} \
        --json "$OUT/precision.json" > "$OUT/precision.log" 2>&1 || rc=$?
      tail -n 60 "$OUT/precision.log" ;;
    tests)
      # SIGINT at the limit, so pytest still prints what passed and failed
      timeout -s INT "$secs" python3 -m pytest -m gpu -n "${WORKERS:-4}" -v -rfE -p no:cacheprovider --durations=15 \
        tests/adversarial/test_gpu_attacks.py tests/adversarial/test_gpu_runtime_attacks.py tests/test_gpu.py \
        tests/test_gpu_sharing.py tests/test_precision.py tests/test_prepare_ahead.py tests/test_exchange_shortcuts.py \
        tests/test_input_source.py tests/test_judge_memory_plan.py tests/test_task_facts.py tests/test_task_lint.py \
        tests/test_diagnostics.py tests/service/test_gpu_e2e.py ${TESTS_K:+-k "$TESTS_K"} > "$OUT/gpu_tests.log" 2>&1 || rc=$?
      grep -E "PASSED|FAILED|ERROR|SKIPPED" "$OUT/gpu_tests.log" | grep "::" | sed 's/^\[gw[0-9]*\] \[ *[0-9]*%\] //' | sort | uniq > "$OUT/gpu_tests_outcomes.txt"
      tail -n 40 "$OUT/gpu_tests.log" ;;
    fidelity)
      timeout "$secs" python3 benchmarks/timing_fidelity.py --device cuda \
        --tasks "${TASKS:-L1/1:small,L1/3:small,L2/3:default,L1/1:default,L1/3:default,L2/3:small}" \
        --kernelbench "$kb_root" --kb "${KB:-32_HardTanh,95_CrossEntropyLoss,23_Softmax}" \
        --inputs "${INPUTS:-100}" --budget "${BUDGET:-1.5}" --protocols "${PROTOCOLS:-blocks,lone}" \
        --repeats "${REPEATS:-1}" --chunks "${CHUNKS:-5}" --max-seconds $((secs - 60)) --out "$OUT/fidelity" \
        > "$OUT/fidelity.log" 2>&1 || rc=$?
      sed -n '/^## Timing fidelity/,$p' "$OUT/fidelity.log"
      [[ $rc -eq 0 ]] || tail -n 20 "$OUT/fidelity.log" ;;
    drift)
      timeout "$secs" python3 benchmarks/probes/drift_probe.py --device cuda --task "${DRIFT_TASK:-L1/1}" \
        --size-profile "${DRIFT_PROFILE:-small}" --variant "${DRIFT_VARIANT:-identical}" --modes "${DRIFT_MODES:-fresh,placed}" \
        --rounds "${DRIFT_ROUNDS:-3000}" --repeats "${DRIFT_REPEATS:-3}" --json "$OUT/drift.json" > "$OUT/drift.log" 2>&1 || rc=$?
      tail -n 20 "$OUT/drift.log" ;;
    attacks)
      timeout "$secs" python3 scripts/attack_sweep.py --device cuda --static "${STATIC:-off}" \
        --out "$OUT/attacks.json" > "$OUT/attacks.log" 2>&1 || rc=$?
      tail -n 45 "$OUT/attacks.log" ;;
    corpus)
      timeout "$secs" python3 scripts/honest_sweep.py --device cuda --static "${STATIC:-off}" --budget 1 \
        --inputs 100 --build-workers 8 --cache-dir "$EVALFARM_CACHE_DIR" --out "$OUT/corpus.json" \
        > "$OUT/corpus.log" 2>&1 || rc=$?
      tail -n 45 "$OUT/corpus.log" ;;
    *) echo "unknown stage $name (smoke, precision, tests, fidelity, drift, attacks, corpus)"; rc=2 ;;
  esac
  summaries+=("$name: rc=$rc in $((SECONDS - t0)) s (limit $secs)")
}

for item in "$@"; do
  run_stage "${item%%:*}" "${item#*:}"
done
echo "=== stages ==="
printf '%s\n' "${summaries[@]}"
[[ -s $OUT/gpu_tests_outcomes.txt ]] && { echo "tests:"; awk '{print $1}' "$OUT/gpu_tests_outcomes.txt" | sort | uniq -c; grep -E "FAILED|ERROR" "$OUT/gpu_tests_outcomes.txt"; }
exit 0
