#!/usr/bin/env bash
# `make bench-protobuf` (and a part of `make bench`): bench/protobuf.py, the same order records as Avro and as
# Protobuf ingested by Tidemark taking turns, against a private Schema Registry (scripts/registry.sh on
# BENCH_REGISTRY_PORT, default 19281; its URL in SCHEMA_REGISTRY_URL) and a fresh private broker
# (BENCH_KAFKA_PORT, default 19292), both stopped afterwards.
# Knobs (BENCH_PROTOBUF_RECORDS, BENCH_RECORD_BYTES, BENCH_REPEATS, BENCH_POISON_EVERY): bench/protobuf.py.
# Writes bench/results/protobuf.json; `.venv/bin/python -m bench.protobuf --page` puts it into docs/BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with_service.sh registry "${BENCH_REGISTRY_PORT:-19281}" \
  scripts/with_broker.sh bench "${BENCH_KAFKA_PORT:-19292}" .venv/bin/python -m bench.protobuf
