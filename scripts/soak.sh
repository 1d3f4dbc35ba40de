#!/usr/bin/env bash
# `make soak`: scripts/soak.py against a fresh private broker (port SOAK_KAFKA_PORT, default 19192).
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with_broker.sh soak "${SOAK_KAFKA_PORT:-19192}" python scripts/soak.py
