#!/usr/bin/env bash
# `make test`: lint, then the unit, integration and end-to-end tests against services of their own,
# started fresh and stopped afterwards: a Kafka broker (port TEST_KAFKA_PORT, default 19092) and the
# local S3-compatible server (port TEST_S3_PORT, default 19000), the local Schema Registry (port
# TEST_REGISTRY_PORT, default 18081; its URL in SCHEMA_REGISTRY_URL), a Spark Connect server for the
# warm path, for local and S3 tables (port TEST_CONNECT_PORT, default 15012; its URL in SPARK_CONNECT_URL)
# and the three-broker TLS cluster (scripts/kafka_cluster.sh; ports from TEST_KAFKA_CLUSTER_BASE_PORT,
# default 27192; fresh data each run in .cache/kafka-cluster-test-PORT, its certificates kept), shared by every
# test that takes the kafka_cluster fixture.
# Extra arguments go to pytest instead of the default `tests` (for example: scripts/test.sh -q
# tests/integration -k replay).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# The run's brokers wait far more than they work (2 CPU-s a minute idle each, measured): the serial collector and
# the C1 compiler only, which a user's broker (make kafka-up, kafka-cluster-up) keeps the defaults of.
export KAFKA_JVM_OPTS=${KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1}
export KAFKA_CLUSTER_JVM_OPTS=${KAFKA_CLUSTER_JVM_OPTS:-$KAFKA_JVM_OPTS}
if [ "${1:-}" != "--inside" ]; then
  port=${TEST_KAFKA_PORT:-19092}
  exec scripts/with_broker.sh "test-$port" "$port" scripts/test.sh --inside "$@"
fi
shift
scripts/lint.sh
export S3_PORT=${TEST_S3_PORT:-19000}
export REGISTRY_PORT=${TEST_REGISTRY_PORT:-18081}
export CONNECT_PORT=${TEST_CONNECT_PORT:-15012}
export KAFKA_CLUSTER_BASE_PORT=${TEST_KAFKA_CLUSTER_BASE_PORT:-27192}
export KAFKA_CLUSTER_HOME=$root/.cache/kafka-cluster-test-$KAFKA_CLUSTER_BASE_PORT
scripts/storage.sh down >/dev/null 2>&1 || true
scripts/registry.sh down >/dev/null 2>&1 || true
scripts/connect.sh down >/dev/null 2>&1 || true
scripts/kafka_cluster.sh down >/dev/null 2>&1 || true
scripts/cdc.sh down >/dev/null 2>&1 || true
# A fresh cluster each run (no topics of earlier runs); the CA and certificates in tls/ are kept
rm -rf "$KAFKA_CLUSTER_HOME"/broker-*
cds_pid=; cds=; cluster_pid=; cluster_log=; unit_pid=; unit_log=
trap 'scripts/connect.sh down >/dev/null 2>&1 || true; scripts/registry.sh down >/dev/null 2>&1 || true;
      scripts/cdc.sh down >/dev/null 2>&1 || true;
      scripts/storage.sh down >/dev/null 2>&1 || true; kill "$cds_pid" 2>/dev/null || true; rm -f "$cds" "$cds.log";
      kill "$cluster_pid" 2>/dev/null || true; scripts/kafka_cluster.sh down >/dev/null 2>&1 || true;
      kill "$unit_pid" 2>/dev/null || true; rm -f "$cluster_log" "$unit_log"' EXIT
# The full run's unit tier (tests/unit, tests/dags: no service) runs now, beside the services' start, on the CPU
# they and the class-data training (when no earlier run left its archive) leave idle, at a lower priority so that
# it slows no service's start; the main run below leaves it out.
if [ $# -eq 0 ]; then
  unit_log=$(mktemp)
  nice -n 10 .venv/bin/python -m pytest -q -p no:cacheprovider -m unit tests/unit tests/dags > "$unit_log" 2>&1 &
  unit_pid=$!
fi
# The run's Spark JVMs share a class-data archive (devkit/spark_cds.py): built once per class path (30-200 s,
# kept per user in ~/.cache/tidemark/jvm), it halves each short job's CPU. It is built while S3, the registry and
# the three-broker cluster start.
cds=$(mktemp)
.venv/bin/python -m devkit.spark_cds > "$cds" 2> "$cds.log" &
cds_pid=$!
cluster_log=$(mktemp)
scripts/kafka_cluster.sh up > "$cluster_log" 2>&1 &
cluster_pid=$!
scripts/storage.sh up
scripts/registry.sh up
if ! wait "$cds_pid"; then cat "$cds.log"; exit 1; fi
cat "$cds.log"  # whether the archive came from an earlier run
if ! wait "$cluster_pid"; then cat "$cluster_log"; exit 1; fi
grep -m1 "brokers ready" "$cluster_log" || true
while IFS= read -r line; do export "$line"; done < "$cds"
rm -f "$cds" "$cds.log"
# The warm path's server (a Spark JVM of the run too: it gets the archive) also serves the lake on the local
# S3 server: its S3A and log-store settings are fixed when it starts, its keys come from its environment.
(
  while IFS= read -r line; do case $line in AWS_ACCESS_KEY_ID=*|AWS_SECRET_ACCESS_KEY=*) export "$line" ;; esac
  done < <(scripts/storage.sh env)
  CONNECT_CONF=$(.venv/bin/python -m devkit.localstack connect-conf) scripts/connect.sh up
)
export "$(scripts/registry.sh env)"
export "$(scripts/connect.sh env)"
echo "tidemark: tests against the broker on 127.0.0.1:$KAFKA_PORT, S3 on 127.0.0.1:$S3_PORT" \
  "and the Schema Registry at $SCHEMA_REGISTRY_URL"
if [ -n "$unit_pid" ]; then
  if ! wait "$unit_pid"; then echo "tidemark: the unit tests failed:" >&2; cat "$unit_log" >&2; exit 1; fi
  echo "tidemark: unit tests (tests/unit, tests/dags): $(tail -n 1 "$unit_log")"
  set -- -m "not unit" tests
fi
# Two workers (pytest-xdist), each taking whole modules in collection order (longest first: tests/conftest.py;
# pytest-xdist would otherwise sort them by their number of tests), so module fixtures (a local Airflow, a cluster)
# start once; every worker has its own SparkSession and Airflow home. TEST_WORKERS=1 runs in one process.
workers=${TEST_WORKERS:-2}
if [ "$workers" -gt 1 ]; then set -- -n "$workers" --dist loadfile --no-loadscope-reorder "$@"; fi
.venv/bin/python -m pytest "$@"
