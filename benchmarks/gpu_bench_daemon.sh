#!/usr/bin/env bash
# The daemon benchmark on the GPU host (docs/benchmarks.md, "Daemon benchmark"), in one call:
#   OUT=/path bash benchmarks/gpu_bench_daemon.sh [candidates=80] [group=8] [limit seconds per run=270] [warm settings="0 1"]
# A local daemon with every GPU (one slot each) scores the stream with 1000 correctness inputs and
# a 10 s timing budget, once per --warm-judges setting (judges started on demand, then started
# ahead), side by side; each run's bench_daemon.{json,md} and daemon log go to $OUT/warm<N>/.
# BLOCKS="on off" runs each setting with correctness blocks on, then off (ScoreConfig.correctness_block),
# into $OUT/warm<N>-blocks-<on|off>/.
# TASKS=L1/7,L1/8,L3/1 limits the stream to those built-in tasks (bench_daemon --tasks); WARM_CALL=on|off
# sets the stream's warm calls (bench_daemon --warm-call; default auto, off on a GPU).
# BUDGET and INPUTS set bench_daemon --budget/--inputs (default 10 s and 1000 on a GPU).
# KB_ROOT=.kb takes the stream's KernelBench tasks from that checkout (bench_daemon --kernelbench-root).
# WINDOWS="1 16" runs each setting once per daemon --task-window value (1: a judge per evaluation),
# into $OUT/warm<N>-window<W>/; RESCORE and REPEATS set bench_daemon --rescore/--repeats (default 3, 3).
# MEMOS="0 default" runs each setting with a window's kept reference outputs off, then at their default
# budget (EVALFARM_REFERENCE_MEMO_MB; a number of MiB also works), into $OUT/...-memo<M>/. They are
# kept only where the workers run in bubblewrap: carry .bin/bwrap where the host has none (it is put
# on PATH here), and each run's "Task windows" line says how many rounds were checked against kept
# outputs, or why none were.
set -uo pipefail
n=${1:-80}
g=${2:-8}
limit=${3:-270}
settings=${4:-"0 1"}
source benchmarks/gpu_env.sh
if ! command -v bwrap >/dev/null 2>&1 && [[ -x .bin/bwrap ]]; then export PATH=$PWD/.bin:$PATH; fi
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/gpu.txt"
dirs=()
for w in $settings; do
  for b in ${BLOCKS:-""}; do
   for win in ${WINDOWS:-""}; do
    for memo in ${MEMOS:-""}; do
    dir="$OUT/warm$w${b:+-blocks-$b}${win:+-window$win}${memo:+-memo$memo}"
    dirs+=("$dir")
    mkdir -p "$dir"
    flag=(); [[ $b == off ]] && flag=(--no-correctness-block)
    [[ -n ${TASKS:-} ]] && flag+=(--tasks "$TASKS")
    [[ -n ${WARM_CALL:-} ]] && flag+=(--warm-call "$WARM_CALL")
    [[ -n $win ]] && flag+=(--serve-arg=--task-window "--serve-arg=$win")
    [[ -n ${KB_ROOT:-} ]] && flag+=(--kernelbench-root "$KB_ROOT")
    [[ -n ${BUDGET:-} ]] && flag+=(--budget "$BUDGET")
    [[ -n ${INPUTS:-} ]] && flag+=(--inputs "$INPUTS")
    # A benchmark of speed, not of isolation: it runs where the host has no bubblewrap too (its
    # results' evidence.sandbox says which sandbox was in force).
    memo_env=(); [[ -n $memo && $memo != default ]] && memo_env=(EVALFARM_REFERENCE_MEMO_MB="$memo")
    env "${memo_env[@]}" timeout "$limit" python3 -m evalfarm.bench_daemon --device cuda --candidates "$n" --group "$g" \
      --rescore "${RESCORE:-3}" --repeats "${REPEATS:-3}" --warm-judges "$w" "${flag[@]}" --allow-weak-sandbox \
      --out "$dir" > "$dir/bench_daemon.log" 2>&1
    echo "bench-daemon --warm-judges $w ${flag[*]} ${memo_env[*]} exit code: $?" | tee -a "$OUT/gpu.txt"
    done
   done
  done
done
for dir in "${dirs[@]}"; do
  cat "$dir/bench_daemon.md" 2>/dev/null || tail -n 30 "$dir/bench_daemon.log"
  # Every result that is not what its kind expects, with its detail, in the output itself (a host
  # may send back only some of the files under $OUT).
  python3 - "$dir/bench_daemon.json" <<'EOF' 2>/dev/null | tee -a "$OUT/unexpected.txt"
import json, sys
expected = {"fast": "OK", "identical": "OK", "slow": "OK", "wrong": "INCORRECT"}
for r in json.load(open(sys.argv[1]))["rows"]:
    if expected.get(r.get("kind")) != r.get("verdict"):
        detail = (r.get("detail") or "").replace("\n", " | ")[:1500]
        print(f"unexpected: {r.get('task')} {r.get('kind')} {r.get('verdict')} done_at={r.get('done_at')}: {detail}")
EOF
done
