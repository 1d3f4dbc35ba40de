#!/usr/bin/env bash
# `make bench-small`: bench/small_batch.py, a 10,000-record batch by spark-submit vs on the warm path,
# against a private Spark Connect server (scripts/connect.sh on BENCH_CONNECT_PORT, default 19302; its URL
# in SPARK_CONNECT_URL) and a fresh private broker (BENCH_KAFKA_PORT, default 19292), both stopped afterwards.
# Knobs (BENCH_SMALL_RECORDS, BENCH_RECORD_BYTES, BENCH_REPEATS): bench/small_batch.py.
# Writes bench/results/small_batch.json.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with_service.sh connect "${BENCH_CONNECT_PORT:-19302}" \
  scripts/with_broker.sh bench "${BENCH_KAFKA_PORT:-19292}" .venv/bin/python -m bench.small_batch
