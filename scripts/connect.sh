#!/usr/bin/env bash
# A warm Spark: a long-running Spark Connect server (Spark's Connect plugin in a driver of its own,
# plugins/tidemark_spark/connect_server.py, with the Kafka-source and Delta jars of `make jars`) on 127.0.0.1,
# that ingest jobs talk to instead of starting a JVM each (a Spark connection of type `spark_connect`; see
# docs/OPERATIONS.md). Its sessions share one class loader (artifact isolation off), so code Spark generates
# for a batch is compiled once per server, not once per batch (the module says why).
#   scripts/connect.sh up | down | status | wait | env
# Environment: CONNECT_PORT (15002), CONNECT_MASTER (local[2]), CONNECT_DRIVER_MEMORY (1g),
# CONNECT_HOME (.cache/connect-<port>: log, pid), CONNECT_START_TIMEOUT (120 s), CONNECT_CONF (extra
# `--conf key=value` arguments, space-separated: e.g. the S3A and Delta log-store settings of a lake
# on object storage, which a Connect session cannot set for itself).
# `up` is idempotent: a live server is left alone, a stale pid file is cleared.
set -euo pipefail
source "$(dirname "$0")/lib/service.sh"
# shellcheck source=scripts/env.sh
source "$root/scripts/env.sh"
port=${CONNECT_PORT:-15002}
master=${CONNECT_MASTER:-local[2]}
memory=${CONNECT_DRIVER_MEMORY:-1g}
home=${CONNECT_HOME:-$root/.cache/connect-$port}
url=sc://127.0.0.1:$port
# sessions=1: the JVM, its Python driver and its Python workers are one process group, stopped together
service=connect pidfile=$home/server.pid logfile=$home/server.log where="at $url" sessions=1
start_timeout=${CONNECT_START_TIMEOUT:-120}

answers() {  # a Connect client can open a session and run a query, within 30 s: pyspark's own client retries
  # a server that is not ready yet (gRPC UNAVAILABLE) for 10 minutes and more, which would hold `up` past
  # CONNECT_START_TIMEOUT; here it retries for a few seconds (`wait` probes again until CONNECT_START_TIMEOUT),
  # and `timeout` bounds the whole probe. A probe that fails leaves at once: the client's exit would release its
  # session, retrying that as long again.
  service_listening "$port" && timeout -k 5 30 "$root/.venv/bin/python" - "$url" <<'EOF' >/dev/null 2>&1
import os
import sys
from pyspark.sql import SparkSession
from pyspark.sql.connect.client.retries import DefaultPolicy
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
spark.client.set_retry_policies([DefaultPolicy(max_retries=3, backoff_multiplier=2.0, initial_backoff=200,
                                               max_backoff=2000)])
try:
    spark.range(1).collect()
except Exception:
    os._exit(1)
EOF
}

cmd_env() { echo "SPARK_CONNECT_URL=$url"; }

cmd_up() {
  service_already_up && return 0
  service_port_free "$port" CONNECT_PORT
  local jars
  jars=$(ls "$TIDEMARK_JAR_CACHE"/spark/*.jar 2>/dev/null | paste -sd, -)
  [ -n "$jars" ] || { echo "connect: no Spark jars in $TIDEMARK_JAR_CACHE/spark; run make jars" >&2; exit 1; }
  local extra=()
  for kv in ${CONNECT_CONF:-}; do extra+=(--conf "$kv"); done
  local started=$SECONDS
  # The session settings of the ingest job's own SparkSession (tidemark_spark.ingest_job), fixed at start:
  # a Connect session cannot change the SQL extensions or the catalog. Bound to 127.0.0.1 only: the
  # server runs whatever its clients send, with the rights of the user who started it.
  service_launch "$home" "$SPARK_HOME/bin/spark-submit" \
    --conf spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin \
    --conf spark.sql.artifact.isolation.enabled=false --name tidemark-connect \
    --master "$master" --driver-memory "$memory" --jars "$jars" \
    --conf spark.connect.grpc.binding.address=127.0.0.1 --conf spark.connect.grpc.binding.port="$port" \
    --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \
    --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \
    --conf spark.sql.session.timeZone=UTC --conf spark.databricks.delta.snapshotPartitions=4 \
    --conf spark.ui.showConsoleProgress=false \
    --conf "spark.redaction.regex=(?i)secret|password|token|access[.]?key|jaas" \
    --conf "spark.sql.redaction.options.regex=(?i)url|jaas|password|secret|token|keystore|truststore|ssl[.]key" \
    "${extra[@]}" "$root/plugins/tidemark_spark/connect_server.py"
  service_await_start
  echo "connect: Spark Connect server ready at $url in $((SECONDS - started)) s (pid $(service_pid), master $master, log $logfile)"
}

service_main "up|down|status|wait|env" "$@"
