#!/usr/bin/env bash
# Start N learner processes of one jax.distributed job on this host (loopback coordinator):
# one per GPU on a GPU host, or N CPU processes (tests, a laptop). Process 0 is the controller
# (farm, exemplar database, metrics, report: docs/training.md, "Several processes").
#
#   scripts/learner_processes.sh 2 train --config configs/gpu_cluster.py --config.workdir=runs/x
#   scripts/learner_processes.sh 2 -m learner.bench.scaling run --parts rl   # another module
#
# Process 0 writes to this terminal; process i > 0 to $LEARNER_LOG_DIR/process-<i>.log (default:
# the current directory). With GPUs, process i sees GPU i only (LEARNER_LOCAL_DEVICE_IDS=i; set
# LEARNER_GPUS_PER_PROCESS=k to give each process k consecutive GPUs). Each process gets
# LEARNER_PROCESSES_PER_HOST=N: N processes share this host's memory when they build the initial
# weights there (learner.lm.sharding.init_placement). Environment:
#   PYTHON             the interpreter (default: python3)
#   LEARNER_PORT       the coordinator's port (default: a free one)
#   LEARNER_LOG_DIR    where processes 1..N-1 write their logs
# Exit status: 0 when every process succeeded, else the first non-zero status in process order.
# A process that dies stops the others within distributed.heartbeat_timeout_s.
set -u
if [ $# -lt 2 ]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
N=$1
shift
MODULE=learner
if [ "$1" = "-m" ]; then
  MODULE=${2:?-m needs a module}
  shift 2
fi
PY=${PYTHON:-python3}
PORT=${LEARNER_PORT:-$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
LOGS=${LEARNER_LOG_DIR:-.}
mkdir -p "$LOGS"
GPUS=0
if command -v nvidia-smi >/dev/null 2>&1; then
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
PER=${LEARNER_GPUS_PER_PROCESS:-1}
pids=()
for ((i = 0; i < N; i++)); do
  env_ids=()
  if [ "$GPUS" -gt 0 ]; then
    ids=$(seq -s, $((i * PER)) $((i * PER + PER - 1)))
    env_ids=(LEARNER_LOCAL_DEVICE_IDS="$ids")
  fi
  cmd=(env "${env_ids[@]}" LEARNER_COORDINATOR_ADDRESS="127.0.0.1:$PORT" LEARNER_NUM_PROCESSES="$N"
       LEARNER_PROCESS_ID="$i" LEARNER_PROCESSES_PER_HOST="$N" "$PY" -m "$MODULE" "$@")
  if [ "$i" -eq 0 ]; then
    "${cmd[@]}" &
  else
    "${cmd[@]}" >"$LOGS/process-$i.log" 2>&1 &
  fi
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid"
  rc=$?
  if [ "$status" -eq 0 ] && [ "$rc" -ne 0 ]; then
    status=$rc
  fi
done
exit "$status"
