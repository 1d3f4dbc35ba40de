#!/usr/bin/env bash
# `make bench-keyed`: bench/keyed_changes.py (a keyed table: Tidemark's MERGE batch vs AvailableNow with an idempotent
# foreachBatch MERGE, a replay of the whole range, 1M vs 5M rows) against a private broker on
# BENCH_KEYED_KAFKA_PORT (19492), its data in .cache/kafka-bench-keyed, stopped afterwards whatever happens.
# BENCH_KEYED_RESUME=1 continues a run that was stopped midway: the broker starts again on the topics it kept
# and bench/keyed_changes.py keeps what the stopped run finished (its work folder, .cache/bench-keyed). Without it
# the broker's data and the work folder are wiped first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export KAFKA_HOME=$root/.cache/kafka-bench-keyed
export KAFKA_PORT=${BENCH_KEYED_KAFKA_PORT:-19492}
source scripts/env.sh
scripts/kafka.sh down >/dev/null 2>&1 || true
if [ "${BENCH_KEYED_RESUME:-0}" != 1 ]; then
  rm -rf "$KAFKA_HOME"
fi
scripts/kafka.sh up
trap 'scripts/kafka.sh down >/dev/null 2>&1 || true' EXIT
.venv/bin/python -m bench.keyed_changes
