#!/usr/bin/env bash
# `make soak`: a private broker (port 19192), then scripts/soak.py; the broker stops afterwards.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export KAFKA_PORT=${SOAK_KAFKA_PORT:-19192}
export KAFKA_HOME=$root/.cache/kafka-soak
source scripts/env.sh
scripts/kafka.sh down >/dev/null 2>&1 || true
rm -rf "$KAFKA_HOME"
scripts/kafka.sh up
trap 'scripts/kafka.sh down >/dev/null 2>&1 || true' EXIT
python scripts/soak.py
