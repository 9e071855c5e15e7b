#!/usr/bin/env bash
# Regenerate the checked-in gRPC/protobuf modules under evalfarm/v1/.
# Usage: scripts/gen_protos.sh [OUT_DIR]   (default: the repository root)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT}"
PY="${PYTHON:-python}"
if [[ -x "$ROOT/.venv/bin/python" && -z "${PYTHON:-}" ]]; then PY="$ROOT/.venv/bin/python"; fi
cd "$ROOT"
mkdir -p "$OUT"
"$PY" -m grpc_tools.protoc -Iprotos --python_out="$OUT" --grpc_python_out="$OUT" --pyi_out="$OUT" \
  protos/evalfarm/v1/evalfarm.proto
