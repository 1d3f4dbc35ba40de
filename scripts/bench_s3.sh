#!/usr/bin/env bash
# `make bench-s3`: bench/object_storage.py (one batch to the local disk vs to the local S3 server)
# against a private broker (BENCH_KAFKA_PORT, default 19292) and S3 server (BENCH_S3_PORT, default 19300).
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with_service.sh storage "${BENCH_S3_PORT:-19300}" \
  scripts/with_broker.sh bench "${BENCH_KAFKA_PORT:-19292}" .venv/bin/python -m bench.object_storage
