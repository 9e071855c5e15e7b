#!/usr/bin/env bash
# deploy/smoke.sh: check a farm host end to end, the way it is deployed (docs/operations.md).
#
#   deploy/smoke.sh host   [--device cpu|cuda]   the daemon as deploy/systemd/evalfarm.service runs it
#   deploy/smoke.sh docker [--device cpu|cuda]   deploy/Dockerfile built and run with its documented flags
#
# Either way it writes a token (0600) and a canary secret beside it into a scratch directory
# ($SMOKE_DIR, default a fresh one under /tmp), starts the daemon with the shipped farm.toml (on
# loopback, free ports, the scratch cache), waits for its health, prints `evalfarm status`,
# scores the built-in fast and wrong variants of L1/1, runs the hostile-tenant drill
# (python -m evalfarm.ops.hostile_drill) against it with the token, the config and the canary as the
# secrets, and drains the daemon. It passes (exit 0) when the daemon reported the strong sandbox,
# the fast variant was OK, the wrong one was not, and the drill passed; else exit 1.
#
# --device: default cuda where nvidia-smi lists a GPU, else cpu. Host mode runs $EVALFARM_PYTHON
# (default: python3) with the unit's environment; run it as root, as the unit does. Docker mode
# needs a docker engine; $IMAGE names the image (default evalfarm:smoke).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE="${1:-}"
shift || true
DEVICE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    *) echo "smoke: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$MODE" in host|docker) ;; *) sed -n '2,18p' "$0" >&2; exit 2 ;; esac
if [[ -z "$DEVICE" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then DEVICE=cuda; else DEVICE=cpu; fi
fi
PY="${EVALFARM_PYTHON:-python3}"
WORK="${SMOKE_DIR:-$(mktemp -d /tmp/evalfarm-smoke-XXXXXX)}"
mkdir -p "$WORK/etc" "$WORK/cache"
chmod 0755 "$WORK"
RESULTS=()
FAILED=0
note() { echo "smoke: $*"; }
check() {  # check NAME CONDITION-STATUS DETAIL (printed at once, and again in the summary)
  if [[ "$2" == 0 ]]; then RESULTS+=("PASS  $1: $3"); else RESULTS+=("FAIL  $1: $3"); FAILED=1; fi
  note "${RESULTS[-1]}"
}
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The daemon's secrets, as an operator makes them: a token only root reads, a canary beside it.
openssl rand -hex 32 > "$WORK/etc/token"
echo "smoke-canary-$(openssl rand -hex 16)" > "$WORK/etc/canary"
chmod 600 "$WORK/etc/token" "$WORK/etc/canary"
note "scratch directory $WORK, device $DEVICE, mode $MODE"

# farm.toml as shipped, with its paths and ports moved (TOML keys only; the file is otherwise the same).
config_for() {  # config_for TOKEN_FILE CACHE_DIR PORT METRICS_PORT HEALTH_PORT HOST
  "$PY" - "$ROOT/deploy/systemd/farm.toml" "$@" <<'EOF'
import re, sys
src, token, cache, port, metrics, health, host = sys.argv[1:8]
text = open(src).read()
for key, value in (("host", f'"{host}"'), ("port", port), ("metrics-port", metrics), ("health-port", health),
                   ("auth-token-file", f'"{token}"'), ("cache-dir", f'"{cache}"')):
    text, n = re.subn(rf"^{re.escape(key)}\s*=.*$", f"{key} = {value}", text, flags=re.MULTILINE)
    if n != 1:
        sys.exit(f"smoke: farm.toml has no single {key} line")
print(text, end="")
EOF
}

VARIANTS='
import sys
from evalfarm.tasks import builtin_suite
device = sys.argv[1]
for kind in ("fast", "wrong"):
    v = next(v for v in builtin_suite().variants("L1/1") if v.kind == kind and v.runs_on(device))
    print(kind, v.path)
'

verdict_of() { "$PY" -c 'import json, sys; print(json.loads(sys.stdin.read())["verdict"])'; }

# The checks, through ${EF[@]} (the evalfarm command) and ${PYC[@]} (a python with evalfarm), which
# are local commands in host mode and `docker exec` ones in docker mode; file paths as they see them.
run_checks() {
  local status_out
  status_out="$("${EF[@]}" status --server "127.0.0.1:$GRPC" --token-file "$TOKEN_IN")" || true
  echo "$status_out"
  grep -q "sandbox strong:" <<<"$status_out"; check "daemon reports the strong sandbox" $? \
    "$(grep -m1 ' sandbox ' <<<"$status_out" | sed 's/^ *//' || echo 'no sandbox line')"
  while read -r kind path; do
    local out verdict
    out="$("${EF[@]}" score --server "127.0.0.1:$GRPC" --token-file "$TOKEN_IN" --task L1/1 \
           --candidate "$path" --json --inputs "$INPUTS" --budget "$BUDGET" --timeout 1800)" || true
    verdict="$(verdict_of <<<"$out" 2>/dev/null || echo none)"
    if [[ "$kind" == fast ]]; then [[ "$verdict" == OK ]]; else [[ "$verdict" != OK && "$verdict" != none ]]; fi
    check "built-in $kind variant of L1/1" $? "$verdict"
  done < <("${PYC[@]}" -c "$VARIANTS" "$DEVICE")
  "${PYC[@]}" -m evalfarm.ops.hostile_drill --server "127.0.0.1:$GRPC" --token-file "$TOKEN_IN" \
    --secret-file "$TOKEN_IN" --secret-file "$CONFIG_IN" --secret-file "$CANARY_IN"
  check "hostile-tenant drill (token, config, canary)" $? "secrets under $(dirname "$TOKEN_IN")"
}

if [[ "$DEVICE" == cuda ]]; then INPUTS=1000; BUDGET=10; else INPUTS=20; BUDGET=0.5; fi

if [[ "$MODE" == host ]]; then
  GRPC="$(free_port)"; METRICS="$(free_port)"; HEALTH="$(free_port)"
  config_for "$WORK/etc/token" "$WORK/cache" "$GRPC" "$METRICS" "$HEALTH" 127.0.0.1 > "$WORK/etc/farm.toml"
  chmod 600 "$WORK/etc/farm.toml"
  # The unit's environment, its cache paths moved into the scratch directory.
  mapfile -t UNIT_ENV < <(sed -n 's/^Environment=//p' "$ROOT/deploy/systemd/evalfarm.service" \
                          | sed "s#/var/cache/evalfarm#$WORK/cache#g")
  DEVICE_ARGS=(); [[ "$DEVICE" == cpu ]] && DEVICE_ARGS=(--device cpu)
  note "starting: $PY -m evalfarm serve --config $WORK/etc/farm.toml ${DEVICE_ARGS[*]} (as $(id -un), like the unit)"
  (cd "$WORK/cache" && exec env "${UNIT_ENV[@]}" "$PY" -m evalfarm serve --config "$WORK/etc/farm.toml" \
     "${DEVICE_ARGS[@]}" >"$WORK/daemon.out" 2>"$WORK/daemon.log") &
  DAEMON=$!
  stop_daemon() { kill -TERM "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; }
  trap stop_daemon EXIT
  up=1
  for _ in $(seq 1 180); do
    if ! kill -0 "$DAEMON" 2>/dev/null; then break; fi
    if "$PY" -m evalfarm status --health-only --server "127.0.0.1:$HEALTH" --timeout 2 >/dev/null 2>&1; then up=0; break; fi
    sleep 1
  done
  check "daemon started and healthy" $up "$(grep -m1 'evalfarm serve: error' "$WORK/daemon.log" || echo "health port $HEALTH")"
  if [[ $up == 0 ]]; then
    TOKEN_IN="$WORK/etc/token"; CONFIG_IN="$WORK/etc/farm.toml"; CANARY_IN="$WORK/etc/canary"
    EF=("$PY" -m evalfarm); PYC=("$PY")
    run_checks
  else
    tail -n 20 "$WORK/daemon.log" >&2
  fi
  stop_daemon
  trap - EXIT
else
  command -v docker >/dev/null 2>&1 || { echo "smoke: docker mode needs docker" >&2; exit 2; }
  IMAGE="${IMAGE:-evalfarm:smoke}"
  NAME="evalfarm-smoke-$$"
  GRPC=50051
  note "building $IMAGE"
  docker build -f "$ROOT/deploy/Dockerfile" -t "$IMAGE" "$ROOT"
  # The image's paths: /etc/evalfarm holds farm.toml, the token and the canary; ports as shipped.
  config_for /etc/evalfarm/token /var/cache/evalfarm 50051 9400 8086 0.0.0.0 > "$WORK/etc/farm.toml"
  chmod 600 "$WORK/etc/farm.toml"
  GPU_ARGS=(); DEVICE_ARGS=()
  if [[ "$DEVICE" == cuda ]]; then GPU_ARGS=(--gpus all); else DEVICE_ARGS=(--device cpu); fi
  # The documented flags (deploy/Dockerfile's header); the checks run inside it (docker exec).
  docker run -d --name "$NAME" "${GPU_ARGS[@]}" \
    --cap-add SYS_ADMIN --cap-add NET_ADMIN \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined --shm-size 8g \
    -v "$WORK/etc:/etc/evalfarm:ro" -v "$WORK/cache:/var/cache/evalfarm" \
    "$IMAGE" --config /etc/evalfarm/farm.toml "${DEVICE_ARGS[@]}" >/dev/null
  stop_container() { docker stop -t 150 "$NAME" >/dev/null 2>&1 || true; docker logs "$NAME" >"$WORK/daemon.log" 2>&1 || true
                     docker rm -f "$NAME" >/dev/null 2>&1 || true; }
  trap stop_container EXIT
  up=1
  for _ in $(seq 1 300); do
    if [[ "$(docker inspect -f '{{.State.Running}}' "$NAME" 2>/dev/null)" != true ]]; then break; fi
    if docker exec "$NAME" evalfarm status --health-only --server 127.0.0.1:8086 --timeout 2 >/dev/null 2>&1; then up=0; break; fi
    sleep 1
  done
  check "container started and healthy" $up "$(docker logs "$NAME" 2>&1 | grep -m1 'evalfarm serve: error' || echo running)"
  if [[ $up == 0 ]]; then
    TOKEN_IN=/etc/evalfarm/token; CONFIG_IN=/etc/evalfarm/farm.toml; CANARY_IN=/etc/evalfarm/canary
    EF=(docker exec "$NAME" evalfarm); PYC=(docker exec "$NAME" python)
    run_checks
  else
    docker logs "$NAME" 2>&1 | tail -n 20 >&2
  fi
  stop_container
  trap - EXIT
fi

# What the candidates tried to get out must not be in the daemon's own log either.
if [[ -s "$WORK/daemon.log" ]]; then
  ! grep -qF -e "$(cat "$WORK/etc/token")" -e "$(cat "$WORK/etc/canary")" "$WORK/daemon.log"
  check "no secret in the daemon's log" $? "$WORK/daemon.log"
fi

echo
echo "smoke ($MODE, $DEVICE), daemon log: $WORK/daemon.log"
printf '%s\n' "${RESULTS[@]}"
if [[ $FAILED == 0 ]]; then echo "smoke: PASS"; else echo "smoke: FAIL"; fi
exit $FAILED
