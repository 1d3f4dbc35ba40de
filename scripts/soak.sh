#!/usr/bin/env bash
# `make soak`: scripts/soak.py against a fresh private broker (port SOAK_KAFKA_PORT, default 19192).
# SOAK_LAKE=s3 keeps the lake on a private local S3 server (port SOAK_S3_PORT, default 19100).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${SOAK_LAKE:-local}" = "s3" ]; then
  export S3_PORT=${SOAK_S3_PORT:-19100}
  scripts/storage.sh down >/dev/null 2>&1 || true
  scripts/storage.sh up
  trap 'scripts/storage.sh down >/dev/null 2>&1 || true' EXIT
fi
scripts/with_broker.sh soak "${SOAK_KAFKA_PORT:-19192}" python scripts/soak.py
