#!/usr/bin/env bash
# `make soak`: scripts/soak.py against a fresh private broker (port SOAK_KAFKA_PORT, default 19192).
# SOAK_LAKE=s3 keeps the lake on a private local S3 server (port SOAK_S3_PORT, default 19100).
set -euo pipefail
cd "$(dirname "$0")/.."
soak=(scripts/with_broker.sh soak "${SOAK_KAFKA_PORT:-19192}" python scripts/soak.py)
if [ "${SOAK_LAKE:-local}" = "s3" ]; then soak=(scripts/with_service.sh storage "${SOAK_S3_PORT:-19100}" "${soak[@]}"); fi
exec "${soak[@]}"
