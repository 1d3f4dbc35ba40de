#!/usr/bin/env bash
# `make bench-fleet`: bench/fleet.py, a fleet of pipelines (BENCH_FLEET_PIPELINES, 50, of
# BENCH_FLEET_RECORDS, 10,000, each on its own topic): one scheduler tick on `make airflow`'s stack, on the
# warm path and by spark-submit, against as many AvailableNow jobs one after another and
# BENCH_FLEET_CONCURRENCY (4) at a time; against a fresh private broker (BENCH_FLEET_KAFKA_PORT, default
# 34592), stopped afterwards. The Airflow stacks and the Spark Connect server are bench/fleet.py's own
# (private ports, see its docstring), each stopped when its phase ends. Writes bench/results/fleet.json.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with_broker.sh fleet "${BENCH_FLEET_KAFKA_PORT:-34592}" .venv/bin/python -m bench.fleet
