#!/usr/bin/env bash
# Where a worker exchange's time goes on a GPU, side by side under a few settings, in one call:
# each candidate is scored once per setting (settings interleaved per candidate), every judge
# writing its round trace (evalfarm.judge.round_trace); then one table per evaluation.
#
#   OUT=$OUT bash benchmarks/gpu_round_trace.sh [INPUTS] [BUDGET] [SETTINGS] [CANDIDATES]
#
# SETTINGS: space-separated names, each "base" or NAME=ITEM[,ITEM]: an ITEM is ENV=VALUE (the
# environment the daemon-less `evalfarm score` runs with), --flag=value (one of its options) or @DIR
# (another checkout's evalfarm, e.g. `git archive REV evalfarm | tar -x -C .before`), e.g.
# "base nopoison=EVALFARM_WORKER_POISON=0 warm=--warm-call=on before=@.before".
# CANDIDATES: space-separated TASK:VARIANT_FILE (a built-in task id and a file under its variants),
# TASK:@PATH for a candidate file by its path, or TASK:identical for a copy of the task's reference; a TASK of the form kb-level1/12 names a
# KernelBench problem under $KB_ROOT/KernelBench (default .kb), with the variant identical only.
# PROFILE=1: each judge also runs under cProfile (EVALFARM_JUDGE_CPROFILE); its top functions by own
# time and by cumulative time are printed after the evaluation's round summary.
set -u
source benchmarks/gpu_env.sh
INPUTS=${1:-1000}
BUDGET=${2:-10}
SETTINGS=${3:-"base"}
CANDIDATES=${4:-"L2/6:fast_any_tanh_relu.py L1/8:fast_any_gram_expansion.py L2/8:fast_any_cross_entropy.py"}
DEVICE=${DEVICE:-cuda}
WORK=$(mktemp -d)
variant_path() {  # TASK VARIANT -> a candidate file
  python3 - "$1" "$2" "$WORK" <<'EOF'
import os
import sys
from pathlib import Path
from evalfarm.bench_daemon import identical_source
task_id, variant, work = sys.argv[1:]
if task_id.startswith("kb-level"):
    level, num = task_id[len("kb-level"):].split("/")
    task = next(Path(os.environ.get("KB_ROOT", ".kb"), "KernelBench", f"level{level}").glob(f"{num}_*.py"))
    out = Path(work) / f"identical_kb{level}_{num}.py"
    out.write_text(identical_source(task.read_text()))
    print(task.resolve(), out)
    sys.exit(0)
level, num = task_id[1:].split("/")
root = Path("evalfarm/tasks/builtin")
task = next(root.glob(f"level{level}/{num}_*.py"))
if variant.startswith("@"):  # a candidate file by its path, e.g. @tests/honest/kernels/l2_2_pool_folded_conv.py
    print(task.resolve(), Path(variant[1:]).resolve())
elif variant == "identical":
    out = Path(work) / f"identical_{level}_{num}.py"
    out.write_text(identical_source(task.read_text()))
    print(task.resolve(), out)
else:
    print(task.resolve(), next(root.glob(f"variants/level{level}/{num}_*/{variant}")).resolve())
EOF
}
for cand in $CANDIDATES; do
  read -r task_file cand_file < <(variant_path "${cand%%:*}" "${cand#*:}")
  for setting in $SETTINGS; do
    name=${setting%%=*}
    envs=() flags=() items=() root=$PWD
    if [ "$setting" != "$name" ]; then IFS=',' read -r -a items <<< "${setting#*=}"; fi
    for item in "${items[@]}"; do
      if [ "${item#--}" != "$item" ]; then flags+=("$item")
      elif [ "${item#@}" != "$item" ]; then root=$(cd "${item#@}" && pwd)
      else envs+=("$item"); fi
    done
    tag="$(echo "$cand" | sed 's#:@.*/#:#' | tr '/:.@' '____')-$name"
    n=2; base_tag=$tag
    while [ -e "$OUT/rt/$tag" ]; do tag="$base_tag-$n"; n=$((n + 1)); done  # a candidate named twice
    mkdir -p "$OUT/rt/$tag"
    echo "== $tag ($cand, ${items[*]:-as it is})"
    if [ "${PROFILE:-0}" = 1 ]; then envs+=("EVALFARM_JUDGE_CPROFILE=$OUT/rt/$tag"); fi
    t0=$(date +%s.%N)
    (cd "$root" && env "${envs[@]}" PYTHONPATH="/tmp/site:$root" EVALFARM_ROUND_TRACE="$OUT/rt/$tag" python3 -m evalfarm score --device "$DEVICE" \
      --task "$task_file" --candidate "$cand_file" --inputs "$INPUTS" --budget "$BUDGET" --no-other-sizes \
      "${flags[@]}" --json > "$OUT/rt/$tag/result.json" 2> "$OUT/rt/$tag/stderr.log")
    echo "$t0 $(date +%s.%N)" | awk '{printf "%.2f\n", $2 - $1}' > "$OUT/rt/$tag/wall_s.txt"
    python3 - "$OUT/rt/$tag/result.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
ev = r.get("evidence", {})
t = ev.get("timing") or {}
ph = ev.get("phases_s", {})
print(f"   verdict {r.get('verdict')} speedup {r.get('speedup')} rounds {t.get('rounds')} "
      f"ci {t.get('ci_low')}-{t.get('ci_high')} correctness {ph.get('correctness')} timing {ph.get('timing')} "
      f"evaluation {ph.get('evaluation') or ph.get('total')}")
print("   phases " + " ".join(f"{k}={v:.3g}" for k, v in ph.items() if k.startswith(("rounds_", "setup_", "load"))))
print(f"   rounds per batch {(ev.get('memory') or {}).get('rounds_per_batch')} blocks {t.get('blocks')}")
EOF
    python3 scripts/round_trace_summary.py "$OUT/rt/$tag" --skip 10 | tee "$OUT/rt/$tag/summary.txt"
    for prof in "$OUT/rt/$tag"/judge-*.prof; do
      [ -e "$prof" ] || continue
      python3 - "$prof" <<'EOF' | tee "$prof.txt"
import pstats, sys
for key in ("tottime", "cumulative"):
    print(f"-- {sys.argv[1].rsplit('/', 1)[-1]}: top 25 by {key}")
    pstats.Stats(sys.argv[1]).sort_stats(key).print_stats(25)
EOF
    done
  done
done
# One line per evaluation, last: what each setting gave.
python3 - "$OUT/rt" <<'EOF' | tee "$OUT/table.md"
import json, subprocess, sys
from pathlib import Path
print("| evaluation | verdict | speedup | rounds | wall s | evaluation s | correctness s | audits s | timing s "
      "| paired round ms | round spread |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for d in sorted(Path(sys.argv[1]).iterdir()):
    try:
        r = json.loads((d / "result.json").read_text())
    except (OSError, ValueError):
        print(f"| {d.name} | no result | | | | | | | | | |")
        continue
    ev = r.get("evidence", {})
    t, ph = ev.get("timing") or {}, ev.get("phases_s", {})
    out = subprocess.run([sys.executable, "scripts/round_trace_summary.py", str(d), "--json"], capture_output=True,
                         text=True)
    s = next(iter(json.loads(out.stdout).values()), {}) if out.returncode == 0 else {}
    fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)
    wall = (d / "wall_s.txt").read_text().strip() if (d / "wall_s.txt").exists() else ""
    print(f"| {d.name} | {r.get('verdict')} | {r.get('speedup')} | {t.get('rounds')} | {wall} "
          f"| {fmt(ph.get('evaluation') or ph.get('total'))} | {fmt(ph.get('correctness'))} "
          f"| {fmt(ph.get('rounds_audit'))} | {fmt(ph.get('timing'))} | {s.get('paired_round_ms')} | {s.get('speedup_spread')} |")
EOF
tar -czf "$OUT/round_traces.tgz" -C "$OUT" rt && rm -rf "$OUT/rt" "$WORK"
