#!/usr/bin/env bash
# `make demo`: the main job end to end on the embedded default — a local Kafka broker, local
# Spark, Delta tables on the local disk and Airflow 3 (SQLite metadata DB under .cache/airflow).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source scripts/env.sh
scripts/kafka.sh up
airflow db migrate >"$root/.cache/airflow-migrate.log" 2>&1 \
  || { echo "demo: 'airflow db migrate' failed; see .cache/airflow-migrate.log" >&2; exit 1; }
exec python scripts/demo.py
