#!/usr/bin/env bash
# The daemon benchmark for two checkouts side by side in one call (docs/benchmarks.md, 2b):
#   OUT=/path TASKS=L1/4,L1/8 bash benchmarks/gpu_bench_sides.sh [candidates=12] [group=3] [limit s per run=150] [sides="after before"]
# "after" is this checkout; any other side NAME is .NAME/ (e.g. `git archive <rev> evalfarm scripts`
# unpacked there). Each side runs the stream once, in the order given (repeat a name to interleave:
# "after before after before"), --warm-judges 1, 1000 correctness inputs, a 10 s timing budget;
# each run's bench_daemon.{json,md} goes to $OUT/<side>-<k>/, and the summary lines print last;
# JSON_ONLY=1 keeps only $OUT/<side>-<k>.json; RESCORE=N also scores N fast candidates 3 times each
# (the reward CV, bench_daemon --rescore).
set -uo pipefail
n=${1:-12}
g=${2:-3}
limit=${3:-150}
sides=${4:-"after before"}
source benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
site=${PYTHONPATH%%:*}
k=0
for side in $sides; do
  k=$((k + 1))
  # SIDE is BASE or BASE-nohold (the daemon's --standby-hold off); BASE "after" is this checkout
  base=${side%-nohold}; flag=(); [[ $base != "$side" ]] && flag+=(--standby-hold off)
  root=$PWD; [[ $base != after ]] && root=$PWD/.$base
  [[ -d $root/evalfarm ]] || { echo "no $root/evalfarm: skipping $side"; continue; }
  dir="$OUT/$side-$k"
  mkdir -p "$dir"
  [[ -n ${TASKS:-} ]] && flag+=(--tasks "$TASKS")
  (cd "$root" && PYTHONPATH="$site:$root" timeout "$limit" python3 -m evalfarm.bench_daemon --device cuda \
    --candidates "$n" --group "$g" --rescore "${RESCORE:-0}" --repeats 3 --warm-judges 1 "${flag[@]}" --out "$dir") \
    > "$dir/bench_daemon.log" 2>&1
  echo "$side-$k exit code: $?" | tee -a "$OUT/gpu.txt"
done
for dir in "$OUT"/*-[0-9]*/; do
  echo "== $(basename "$dir")"
  sed -n '3,5p;9,9p' "$dir/bench_daemon.md" 2>/dev/null || tail -n 5 "$dir/bench_daemon.log"
done
# JSON_ONLY=1: keep only <side>-<k>.json in $OUT (the device tool brings back few files)
if [[ -n ${JSON_ONLY:-} ]]; then
  for dir in "$OUT"/*-[0-9]*/; do
    name=$(basename "$dir")
    cp "$dir/bench_daemon.json" "$OUT/$name.json" 2>/dev/null
    rm -rf "$dir"
  done
fi
