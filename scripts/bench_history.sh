#!/usr/bin/env bash
# `make bench-history`: bench/history_cost.py (a history table, keyed.history: scd2, against a plain keyed table on
# the same changes) against a private broker on BENCH_HISTORY_KAFKA_PORT (19492), its data in
# .cache/kafka-bench-history, wiped first and stopped afterwards whatever happens. Sizes: BENCH_HISTORY_KEYS
# (200,000), BENCH_HISTORY_CHANGES (1,000,000). Results: bench/results/history.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export KAFKA_HOME=$root/.cache/kafka-bench-history
export KAFKA_PORT=${BENCH_HISTORY_KAFKA_PORT:-19492}
source scripts/env.sh
scripts/kafka.sh down >/dev/null 2>&1 || true
rm -rf "$KAFKA_HOME"
scripts/kafka.sh up
trap 'scripts/kafka.sh down >/dev/null 2>&1 || true' EXIT
.venv/bin/python -m bench.history_cost
