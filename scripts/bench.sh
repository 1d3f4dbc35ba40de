#!/usr/bin/env bash
# `make bench`: bench/run.py against a fresh private broker (port BENCH_KAFKA_PORT, default 19292),
# stopped afterwards; then the Avro benchmark (scripts/bench_avro.sh: bench/avro.py against a fresh
# broker and a private Schema Registry) unless BENCH_SKIP names `avro`. Knobs (BENCH_RECORDS,
# BENCH_RECORD_BYTES, BENCH_REPEATS, ...): bench/run.py and bench/avro.py.
# Writes bench/results/bench.json, docs/BENCHMARKS.md, docs/benchmarks.png and bench/results/avro.json.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/with_broker.sh bench "${BENCH_KAFKA_PORT:-19292}" .venv/bin/python -m bench.run
case ",${BENCH_SKIP:-}," in
  *,avro,*) exit 0 ;;
esac
scripts/bench_avro.sh
# bench.run wrote docs/BENCHMARKS.md before avro.json was new: write it again (from the stored JSON).
exec .venv/bin/python -m bench.report
