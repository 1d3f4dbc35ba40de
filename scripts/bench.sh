#!/usr/bin/env bash
# `make bench`: bench/run.py against a fresh private broker (port BENCH_KAFKA_PORT, default 19292),
# stopped afterwards. Knobs (BENCH_RECORDS, BENCH_RECORD_BYTES, BENCH_REPEATS, ...): bench/run.py.
# Writes bench/results/bench.json, docs/BENCHMARKS.md and docs/benchmarks.png.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with_broker.sh bench "${BENCH_KAFKA_PORT:-19292}" .venv/bin/python -m bench.run
