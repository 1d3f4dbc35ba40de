#!/usr/bin/env bash
# `make chaos`: the soak of bench/chaos (issue 26) on a private stack, stopped and removed whatever happens
# (the trap runs on success, failure, Ctrl-C and the time limit):
#   the CeleryExecutor stack of scripts/airflow.sh (api-server, scheduler, dag-processor, triggerer, two
#   Celery workers, Redis, PostgreSQL), a Spark standalone cluster (scripts/spark_cluster.sh: a master and
#   two workers), a Kafka broker (scripts/kafka.sh) and the local S3 server (scripts/storage.sh) behind a
#   restartable TCP proxy (bench/chaos/proxy.py), all on ports 32000-32999 and under .cache/chaos.
# Environment: CHAOS_FAULTS (100), CHAOS_TIMEOUT (4500 s: no fault after CHAOS_TIMEOUT minus
# CHAOS_DRAIN_SECONDS (1200), the audit then runs whatever is left, and the whole soak is killed at
# CHAOS_TIMEOUT + 600 s), CHAOS_GAP (8,25: seconds a fault waits for the phase it aims at), CHAOS_PIPELINES (3),
# CHAOS_KINDS (all: celery_worker,spark_driver,spark_worker,s3,postgres,kafka_broker), CHAOS_RESULT
# (chaos.json, under bench/results), CHAOS_CHART (chaos.png, under docs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CHAOS_HOME=$root/.cache/chaos
export KAFKA_PORT=32192 KAFKA_HOME=$CHAOS_HOME/kafka
export S3_PORT=32100 S3_BACKEND_PORT=32101 S3_HOME=$CHAOS_HOME/s3
export EXECUTOR=celery CELERY_WORKER_CONCURRENCY=2 AIRFLOW_LOCAL_HOME=$CHAOS_HOME/airflow
export AIRFLOW_PORT=32080 PG_PORT=32432 REDIS_PORT=32379 CELERY_LOG_PORT=32793
export PG_HOME=/tmp/tidemark-chaos-postgres  # PostgreSQL runs as nobody under root: a folder it can traverse
export SPARK_MASTER_PORT=32077 SPARK_MASTER_WEBUI_PORT=32090 SPARK_WORKER_WEBUI_PORT=32095
export SPARK_WORKERS=2 SPARK_WORKER_CORES=2 SPARK_WORKER_MEMORY=1g SPARK_CLUSTER_HOME=$CHAOS_HOME/spark
export CHAOS_SPARK_UI_BASE=32400
export TIDEMARK_PIPELINES_DIR=$CHAOS_HOME/pipelines
export TIDEMARK_LAKE_ROOT=s3a://lake/chaos/$(date +%Y%m%d-%H%M%S)
# A task whose worker died is failed (and retried) after 30 s without a heartbeat (Airflow's default: 300 s).
export AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT=30
export AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL=5
source scripts/env.sh
export AIRFLOW_CONN_SPARK_DEFAULT="{\"conn_type\": \"spark\", \"host\": \"spark://127.0.0.1\", \"port\": $SPARK_MASTER_PORT}"
AIRFLOW_CONN_AWS_DEFAULT=$(python -c 'from devkit.localstack import aws_connection; print(aws_connection())')
export AIRFLOW_CONN_AWS_DEFAULT

cleanup() {
  local code=$?
  trap - EXIT INT TERM
  echo "chaos: stopping everything it started"
  if [ -f "$CHAOS_HOME/s3-proxy.pid" ]; then kill -9 "$(cat "$CHAOS_HOME/s3-proxy.pid")" 2>/dev/null || true; fi
  scripts/airflow.sh down >/dev/null 2>&1 || true
  scripts/spark_cluster.sh down >/dev/null 2>&1 || true
  scripts/kafka.sh down >/dev/null 2>&1 || true
  S3_PORT=$S3_BACKEND_PORT scripts/storage.sh down >/dev/null 2>&1 || true
  # What a killed worker's session or a killed driver left behind (executors, drivers): only processes
  # whose command line names this soak's folders.
  local left
  left=$(pgrep -f "$CHAOS_HOME/|$PG_HOME/" || true)
  if [ -n "$left" ]; then echo "chaos: killing leftovers $left"; kill -9 $left 2>/dev/null || true; fi
  rm -rf "$PG_HOME"
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Whatever an earlier soak left (its trap did not run: the machine stopped), then a fresh start.
cleanup_old() {
  scripts/airflow.sh down >/dev/null 2>&1 || true
  scripts/spark_cluster.sh down >/dev/null 2>&1 || true
  scripts/kafka.sh down >/dev/null 2>&1 || true
  S3_PORT=$S3_BACKEND_PORT scripts/storage.sh down >/dev/null 2>&1 || true
  rm -rf "$CHAOS_HOME" "$PG_HOME"
}
cleanup_old
mkdir -p "$CHAOS_HOME" "$PG_HOME" && chmod 755 "$PG_HOME"
timeout=${CHAOS_TIMEOUT:-4500}
timeout --signal=TERM --kill-after=30 $((timeout + 600)) python -m bench.chaos
