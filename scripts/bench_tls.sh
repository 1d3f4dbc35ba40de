#!/usr/bin/env bash
# `make bench-tls`: bench/tls_cost.py, the raw Tidemark ingest job over SASL_SSL against the same job over
# PLAINTEXT, on a private three-broker cluster (scripts/kafka_cluster.sh: ports from
# BENCH_KAFKA_CLUSTER_BASE_PORT, default 30092; data in .cache/kafka-cluster-bench, wiped first, the
# certificates kept), stopped afterwards whatever happens; its lake and pipelines in .cache/bench-tls.
# Knobs (BENCH_TLS_RECORDS, BENCH_RECORD_BYTES, BENCH_PARTITIONS, BENCH_REPEATS): bench/tls_cost.py.
# Writes bench/results/tls.json.
set -euo pipefail
cd "$(dirname "$0")/.."
export KAFKA_CLUSTER_BASE_PORT=${BENCH_KAFKA_CLUSTER_BASE_PORT:-30092}
export KAFKA_CLUSTER_HOME=${BENCH_KAFKA_CLUSTER_HOME:-$PWD/.cache/kafka-cluster-bench}
export KAFKA_PORT=$KAFKA_CLUSTER_BASE_PORT  # broker 1's PLAINTEXT listener: the producer's and the admin's
export BENCH_WORK=${BENCH_WORK:-$PWD/.cache/bench-tls}  # its own lake, pipelines and Airflow home
source scripts/env.sh
scripts/kafka_cluster.sh down >/dev/null 2>&1 || true
rm -rf "$KAFKA_CLUSTER_HOME"/broker-* "$KAFKA_CLUSTER_HOME/cluster.id"
trap 'scripts/kafka_cluster.sh down >/dev/null 2>&1 || true' EXIT
scripts/kafka_cluster.sh up
.venv/bin/python -m bench.tls_cost
