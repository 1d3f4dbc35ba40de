#!/usr/bin/env bash
# `make test`: start a fresh broker for this run (its own port and data folder), run the unit,
# integration and end-to-end tests against it, and stop it afterwards, whatever happened.
# A broker that cannot start fails the run. Extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export KAFKA_PORT=${TEST_KAFKA_PORT:-19092}
export KAFKA_HOME=$root/.cache/kafka-test
source scripts/env.sh

scripts/kafka.sh down >/dev/null 2>&1 || true
rm -rf "$KAFKA_HOME"
scripts/kafka.sh up
trap 'scripts/kafka.sh down >/dev/null 2>&1 || true' EXIT

echo "tidemark: lint"
.venv/bin/ruff check plugins spark_jobs dags tests
echo "tidemark: tests (unit, integration, e2e) against the broker on 127.0.0.1:$KAFKA_PORT"
.venv/bin/python -m pytest tests "$@"
