#!/usr/bin/env bash
# `make bench-avro` (and the last part of `make bench`): bench/avro.py against a private Schema Registry
# (scripts/registry.sh on BENCH_REGISTRY_PORT, default 19281; its URL in SCHEMA_REGISTRY_URL) and a
# fresh private broker (BENCH_KAFKA_PORT, default 19292), both stopped afterwards.
# Knobs (BENCH_AVRO_RECORDS, BENCH_RECORD_BYTES, BENCH_REPEATS, BENCH_AVRO_CONTENDERS): bench/avro.py.
# Writes bench/results/avro.json.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with_service.sh registry "${BENCH_REGISTRY_PORT:-19281}" \
  scripts/with_broker.sh bench "${BENCH_KAFKA_PORT:-19292}" .venv/bin/python -m bench.avro
