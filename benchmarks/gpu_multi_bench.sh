#!/usr/bin/env bash
# The multi-GPU run on one host with several GPUs (docs/benchmarks.md, "Several GPUs of one host"):
#   OUT=/path bash benchmarks/gpu_multi_bench.sh [parts=one,all] [limit seconds per part=540]
# A device call is bounded (10 minutes), so the parts go over several calls on one warm machine:
#   OUT=$OUT bash benchmarks/gpu_multi_bench.sh one        # ~5 min
#   OUT=$OUT bash benchmarks/gpu_multi_bench.sh all        # ~5 min
#   OUT=$OUT bash benchmarks/gpu_multi_bench.sh big,parity # ~6 min
#   OUT=$OUT bash benchmarks/gpu_multi_bench.sh farm 420
# SUITE=tiny runs the scaling parts on a tiny model (a CPU smoke test with simulated devices);
# STEPS_PER_CHECK=8 decodes the rollouts 8 steps per check of the loop condition (sampling.steps_per_check).
# TENSOR=2 runs the `all` part with the weights (and the rollout copy's reads) split two ways on the
# mesh's tensor axis, the rest on fsdp (scaling_<N>_tensor2.json, its own row in the table).
# Results accumulate in $MULTI_DIR (default /tmp/multi-bench, kept while the machine is warm) and
# every call copies them, with table.md over all the parts so far, to $OUT.
# Parts (each under its own `timeout`):
#   one, all  learner.bench.scaling run on the first GPU, then on all GPUs, one process each, the
#             same global batch (a random Qwen2.5-1.5B-shaped model: an RL step at G=16 with
#             micro-batching, and the training step at sequence 4096); the table gives seconds per
#             step by phase, rollout tokens/s, training MFU per GPU and the scaling efficiency
#             (targets: >= 90% on 2-4 GPUs, >= 85% on 8).
#   big       a 7B Qwen2-shaped policy (random init) on all GPUs at configs/gpu_cluster.py's sizes:
#             the memory plan, one SFT step and one RL step, the measured peak per GPU beside it.
#   parity    micro-batched training steps and greedy generation (static, shared prefill,
#             continuous batching) on a sharded mesh of all GPUs equal those on one GPU.
#   farm      a local evalfarm daemon with one slot per GPU (--gpus all) scoring a stream of
#             built-in CUDA variants (1000 inputs, 10 s budget) while no learner runs: candidates
#             per minute per slot, GPU busy per GPU, the GPU model the client routes by.
#   train-procs  `learner train` as one process per GPU (scripts/learner_processes.sh) on a short
#             run of configs/demo.py (SFT, one self-supervised round, RL steps, the evaluations)
#             against a local farm daemon on the same GPUs; then `train-one`, the same run as one
#             process on all GPUs (sharing the first run's farm result cache and JAX compilation
#             cache). The table: each run's RL step seconds by phase (learner.bench.run_steps) and
#             whether the one-process run's exemplar database equals the first run's row for row.
#   rl-procs  the scaling RL step (--parts rl) as one process on all GPUs, then as one process per
#             GPU: its own row, "N (N processes)", in the scaling table.
set -uo pipefail
cd "$(dirname "$0")/.."
parts=${1:-one,all}
limit=${2:-540}
OUT="${OUT:-bench-out}"
mkdir -p "$OUT"
source benchmarks/gpu_env.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}"
dir="${MULTI_DIR:-/tmp/multi-bench}"
mkdir -p "$dir"
log="$dir/multi.log"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv >"$dir/gpus.csv" 2>&1
ngpu=$(($(wc -l <"$dir/gpus.csv") - 1))
has() { [[ ",$parts," == *",$1,"* ]]; }
rc=0
for n in one all; do
  if has "$n"; then
    d=$([[ $n == one ]] && echo 1 || echo all)
    t=$([[ $n == one ]] && echo 1 || echo "${TENSOR:-1}")
    echo "== scaling --devices $d --tensor $t ($(date -u +%T))" >>"$log"
    timeout "$limit" python3 -m learner.bench.scaling run --devices "$d" --suite "${SUITE:-1.5b}" --out-dir "$dir" \
      --steps-per-check "${STEPS_PER_CHECK:-1}" --tensor "$t" >>"$log" 2>&1 \
      || { echo "scaling --devices $d exit code $?" | tee -a "$log"; rc=1; }
  fi
done
if has big; then
  echo "== big ($(date -u +%T))" >>"$log"
  timeout "$limit" python3 -m learner.bench.scaling big --config configs/gpu_cluster.py --model qwen2.5-7b \
    --devices all --out-dir "$dir" >"$dir/big.txt" 2>>"$log" || { echo "big exit code $?" | tee -a "$log"; rc=1; }
fi
if has parity; then
  echo "== parity ($(date -u +%T))" >>"$log"
  timeout "$limit" python3 -m learner.bench.scaling parity --devices all >"$dir/parity.txt" 2>>"$log"
  echo "exit code $?" >>"$dir/parity.txt"
fi
TRAIN_ARGS=(--config configs/demo.py --config.tasks.ids=L1/1,L1/2,L2/6 --config.tasks.heldout=
  --config.sft.steps=120 --config.sft.decay_steps=40 --config.selfsup.samples_per_task=2 --config.rl.steps="${RL_STEPS:-4}"
  --config.rl.tasks_per_step=2 --config.rl.group_size=4 --config.sampling.batch_size=8
  --config.eval.samples_per_task=2 --config.eval.prompts=plain --config.farm.options.num_correctness_inputs=100
  --config.farm.options.timing_budget_s=1.0 --config.farm.options.reverify_above=0 --config.progress=False
  --config.farm.local_cache_dir="$dir/farm-cache" --config.jax_cache_dir="$dir/jax-cache")
for n in train-procs train-one; do
  if has "$n"; then
    procs=$([[ $n == train-procs ]] && echo "$ngpu" || echo 1)
    echo "== $n: learner train, $procs process(es) ($(date -u +%T))" >>"$log"
    rm -rf "$dir/$n"
    if [[ $n == train-procs ]]; then
      LEARNER_LOG_DIR="$dir/$n-logs" PYTHON=python3 timeout "$limit" bash scripts/learner_processes.sh "$procs" train \
        "${TRAIN_ARGS[@]}" --config.workdir="$dir/$n" >"$dir/$n.log" 2>&1
    else
      timeout "$limit" python3 -m learner train "${TRAIN_ARGS[@]}" --config.workdir="$dir/$n" >"$dir/$n.log" 2>&1
    fi
    code=$?
    echo "$n exit code $code" | tee -a "$log"
    [[ $code == 0 ]] || { rc=1; tail -n 30 "$dir/$n.log" | tee -a "$log"; }
  fi
done
if has rl-procs; then
  echo "== rl-procs: scaling RL step, 1 process on $ngpu GPUs ($(date -u +%T))" >>"$log"
  timeout "$limit" python3 -m learner.bench.scaling run --parts rl --devices all --suite "${SUITE:-1.5b}" \
    --out-dir "$dir" --steps-per-check "${STEPS_PER_CHECK:-1}" >>"$log" 2>&1 || { echo "rl, 1 process: exit code $?" | tee -a "$log"; rc=1; }
  echo "== rl-procs: scaling RL step, $ngpu processes ($(date -u +%T))" >>"$log"
  LEARNER_LOG_DIR="$dir/rl-procs-logs" PYTHON=python3 timeout "$limit" bash scripts/learner_processes.sh "$ngpu" \
    -m learner.bench.scaling run --parts rl --suite "${SUITE:-1.5b}" --out-dir "$dir" \
    --steps-per-check "${STEPS_PER_CHECK:-1}" >>"$log" 2>&1 || { echo "rl, $ngpu processes: exit code $?" | tee -a "$log"; rc=1; }
fi
if has farm; then
  echo "== farm ($(date -u +%T))" >>"$log"
  # Speed, not isolation: also where the host has no bubblewrap (the evidence says which sandbox).
  timeout "$limit" python3 -m evalfarm.bench_daemon --device cuda --candidates $((ngpu * 24)) --group 8 \
    --rescore 0 --allow-weak-sandbox --out "$dir/farm" >>"$log" 2>&1 || echo "bench_daemon exit code $?" | tee -a "$log"
fi
{
  echo "# Multi-GPU run: $ngpu x $(sed -n 2p "$dir/gpus.csv" | cut -d, -f2 | sed "s/^ *//"), $(date -u +%F)"
  echo; echo "## Scaling (same global batch)"; echo
  python3 -m learner.bench.scaling compare --out-dir "$dir" 2>/dev/null
  if [[ -f $dir/big.txt ]]; then
    echo; echo "## 7B at configs/gpu_cluster.py sizes"; echo
    sed -n '/^| measurement/,$p' "$dir/big.txt"; echo; echo '```'; sed -n '1,/total/p' "$dir/big.txt"; echo '```'
  fi
  if [[ -f $dir/parity.txt ]]; then
    echo; echo "## Sharded equals one GPU"; echo; grep -E "^PARITY|Error|exit code" "$dir/parity.txt" | head -5
  fi
  if [[ -f $dir/farm/bench_daemon.md ]]; then echo; echo "## Farm, one slot per GPU"; echo; cat "$dir/farm/bench_daemon.md"; fi
  runs=()
  for n in train-procs train-one; do [[ -f $dir/$n/metrics.jsonl ]] && runs+=("$n=$dir/$n"); done
  if [[ ${#runs[@]} -gt 0 ]]; then
    echo; echo "## learner train across processes (configs/demo.py, short), a local farm on the same GPUs"; echo
    python3 -m learner.bench.run_steps "${runs[@]}" 2>&1
    grep -hE "stage [a-z]+: step|report:" "$dir/train-procs.log" 2>/dev/null | tail -n 8
  fi
} >"$dir/table.md"
# At most 8 files come back from $OUT.
cp "$dir/table.md" "$dir/multi.log" "$OUT/" 2>/dev/null
cp "$dir"/scaling_*.json "$dir"/big_*.json "$OUT/" 2>/dev/null
cp "$dir/farm/bench_daemon.json" "$OUT/farm.json" 2>/dev/null
for n in train-procs train-one; do
  [[ -f $dir/$n.log ]] && tail -n 400 "$dir/$n.log" >"$OUT/$n.log"
done
[[ -d $dir/train-procs-logs ]] && tail -n 200 "$dir"/train-procs-logs/process-*.log >"$OUT/train-procs-others.log" 2>/dev/null
cat "$dir/table.md"
exit $rc
