#!/usr/bin/env bash
# The judgement work's GPU checks in one call (logs under $OUT; short tables printed last):
#   bash benchmarks/gpu_judgement.sh [tests|compare|corpus|attacks|all] [seconds per stage]
#   tests:   the GPU judge tests and the adversarial GPU suite (WORKERS=4: four at a time)
#   compare: built-in fast variants and identical copies, scored by this farm and by the farm in
#            .before/ (another checkout's evalfarm, e.g. `git archive <rev> evalfarm scripts`),
#            REPS times each, interleaved (after, before, after, before, ...); PROFILE=small for
#            the tasks' small sizes (calls of tens of microseconds); SIDES="after noblocks before"
#            adds this farm with one exchange per call (correctness_block off) to each repetition,
#            "noseccomp" this farm with the workers' seccomp filter off (EVALFARM_SECCOMP=0),
#            "pinned" / "shared" with its processes on a core each / on one core (EVALFARM_PIN_CORES);
#            "warm" with warm calls on (ScoreConfig.warm_call, off on a GPU by default);
#            any other side NAME scores the checkout in .NAME/, and NAME+shared (or +pinned,
#            +noseccomp, +noblocks, +warm) adds that switch to any side
#   corpus:  the honest corpus's CUDA kernels (scripts/honest_sweep.py; STATIC=on|off|both)
#   attacks: the adversarial suite's attacks, static rules on and off (scripts/attack_sweep.py)
set -uo pipefail
what=${1:-all}
secs=${2:-200}
tasks=${TASKS:-L1/1,L1/3,L2/3,L3/2}
source benchmarks/gpu_env.sh
export EVALFARM_CACHE_DIR=/tmp/evalfarm-cache
# bubblewrap carried in .bin/ where the host lacks it (benchmarks/gpu_sandbox.sh says how)
if ! command -v bwrap >/dev/null 2>&1 && [[ -x .bin/bwrap ]]; then export PATH=$PWD/.bin:$PATH; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
if [[ $what == tests || $what == all ]]; then
  # SIGINT at the limit, so pytest still prints what passed and failed (SIGTERM leaves no summary)
  # WORKERS=N runs them N at a time (pytest-xdist): their builds and set-ups overlap, their GPU
  # evaluations still take turns (evalfarm.judge.gpu_lease). Serially, 380 s on an H200 reached 13 of them.
  par=(); [[ -n ${WORKERS:-} ]] && par=(-n "$WORKERS")
  timeout -s INT "$secs" python3 -m pytest -m gpu "${par[@]}" -v -rfE -p no:cacheprovider --durations=10 \
    tests/adversarial/test_gpu_attacks.py tests/adversarial/test_gpu_runtime_attacks.py \
    tests/test_gpu.py tests/test_gpu_sharing.py -k "not builtin_cuda_variants_pass" 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 30
fi
if [[ $what == compare || $what == all ]]; then
  for rep in $(seq 1 "${REPS:-1}"); do
    for side in ${SIDES:-after before}; do
      # SIDE is BASE[+MOD...]: BASE "after" is this checkout, "before" .before/, any other name
      # .NAME/ (another checkout's evalfarm and scripts); a switch alone is "after" with it
      base=${side%%+*}; mods=${side#"$base"}; mods=${mods//+/ }
      case $base in
        after) root=$PWD ;;
        noblocks|noseccomp|pinned|shared|warm) root=$PWD; mods="$base $mods" ;;
        *) root=$PWD/.$base ;;
      esac
      opts=(); envs=()
      for mod in $mods; do
        case $mod in
          noblocks) opts+=(--option correctness_block=false) ;;
          warm) opts+=(--option warm_call=true) ;;
          noseccomp) envs+=(EVALFARM_SECCOMP=0) ;;
          pinned) envs+=(EVALFARM_PIN_CORES=own) ;;
          shared) envs+=(EVALFARM_PIN_CORES=shared) ;;
          *) echo "side $side: unknown switch $mod (noblocks, noseccomp, pinned, shared, warm)"; continue 2 ;;
        esac
      done
      [[ -d $root/evalfarm ]] || { echo "no $root/evalfarm: skipping $side"; continue; }
      env "${envs[@]}" timeout "$secs" python3 benchmarks/gpu_guard_sweep.py --root "$root" --label "$side-$rep" --kinds fast,identical "${opts[@]}" \
        --size-profile "${PROFILE:-auto}" --tasks "$tasks" --inputs 100 --budget 2.0 --max-seconds $((secs - 30)) --out "$OUT/$side-$rep.json" \
        > "$OUT/$side-$rep.log" 2>&1
      tail -n 14 "$OUT/$side-$rep.log"
    done
  done
fi
if [[ $what == corpus || $what == all ]]; then
  timeout "$secs" python3 scripts/honest_sweep.py --device cuda --static "${STATIC:-on}" --build-workers 8 \
    --out "$OUT/corpus.json" > "$OUT/corpus.log" 2>&1
  grep -v "^ " "$OUT/corpus.log" | tail -n 50
fi
if [[ $what == attacks || $what == all ]]; then
  timeout "$secs" python3 scripts/attack_sweep.py --device cuda --static both --out "$OUT/attacks.json" \
    > "$OUT/attacks.log" 2>&1
  tail -n 60 "$OUT/attacks.log"
fi
