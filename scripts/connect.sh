#!/usr/bin/env bash
# A warm Spark: a long-running Spark Connect server (pyspark's own SparkConnectServer, with the
# Kafka-source and Delta jars of `make jars`) on 127.0.0.1, that ingest jobs talk to instead of
# starting a JVM each (a Spark connection of type `spark_connect`; see docs/OPERATIONS.md).
#   scripts/connect.sh up | down | status | env
# Environment: CONNECT_PORT (15002), CONNECT_MASTER (local[2]), CONNECT_DRIVER_MEMORY (1g),
# CONNECT_HOME (.cache/connect-<port>: log, pid), CONNECT_START_TIMEOUT (120 s), CONNECT_CONF (extra
# `--conf key=value` arguments, space-separated: e.g. the S3A and Delta log-store settings of a lake
# on object storage, which a Connect session cannot set for itself).
# `up` is idempotent: a live server is left alone, a stale pid file is cleared.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/env.sh
source "$root/scripts/env.sh"
port=${CONNECT_PORT:-15002}
master=${CONNECT_MASTER:-local[2]}
memory=${CONNECT_DRIVER_MEMORY:-1g}
home=${CONNECT_HOME:-$root/.cache/connect-$port}
pidfile=$home/server.pid
url=sc://127.0.0.1:$port

is_running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

answers() {  # a Connect client can open a session and run a query
  "$root/.venv/bin/python" - "$url" <<'EOF' >/dev/null 2>&1
import sys
from pyspark.sql import SparkSession
SparkSession.builder.remote(sys.argv[1]).getOrCreate().range(1).collect()
EOF
}

wait_ready() {
  local timeout=${CONNECT_START_TIMEOUT:-120}
  local deadline=$((SECONDS + timeout))
  while [ $SECONDS -lt $deadline ]; do
    if ! is_running; then
      echo "connect: the server exited during start-up; last log lines:" >&2
      tail -30 "$home/server.log" >&2 2>/dev/null
      return 1
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && answers; then return 0; fi
    sleep 1
  done
  echo "connect: the server did not answer on $url within ${timeout}s; last log lines:" >&2
  tail -30 "$home/server.log" >&2 2>/dev/null
  return 1
}

up() {
  if is_running; then
    echo "connect: already running at $url (pid $(cat "$pidfile"))"
    return 0
  fi
  rm -f "$pidfile"
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "connect: something else already listens on 127.0.0.1:$port; set CONNECT_PORT to a free port" >&2
    exit 1
  fi
  local jars
  jars=$(ls "$TIDEMARK_JAR_CACHE"/spark/*.jar 2>/dev/null | paste -sd, -)
  [ -n "$jars" ] || { echo "connect: no Spark jars in $TIDEMARK_JAR_CACHE/spark; run make jars" >&2; exit 1; }
  mkdir -p "$home"
  local extra=()
  for kv in ${CONNECT_CONF:-}; do extra+=(--conf "$kv"); done
  local started=$SECONDS
  # The session settings of the ingest job's own SparkSession (tidemark_spark.ingest), fixed at start:
  # a Connect session cannot change the SQL extensions or the catalog. Bound to 127.0.0.1 only: the
  # server runs whatever its clients send, with the rights of the user who started it.
  (cd "$home" && exec nohup "$SPARK_HOME/bin/spark-submit" \
    --class org.apache.spark.sql.connect.service.SparkConnectServer --name tidemark-connect \
    --master "$master" --driver-memory "$memory" --jars "$jars" \
    --conf spark.connect.grpc.binding.address=127.0.0.1 --conf spark.connect.grpc.binding.port="$port" \
    --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \
    --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \
    --conf spark.sql.session.timeZone=UTC --conf spark.databricks.delta.snapshotPartitions=4 \
    --conf spark.ui.showConsoleProgress=false \
    --conf "spark.redaction.regex=(?i)secret|password|token|access[.]?key|jaas" \
    --conf "spark.sql.redaction.options.regex=(?i)url|jaas|password|secret|token" \
    "${extra[@]}" spark-internal >"$home/server.log" 2>&1) &
  echo $! >"$pidfile"
  wait_ready || { down >/dev/null 2>&1; exit 1; }
  echo "connect: Spark Connect server ready at $url in $((SECONDS - started)) s (pid $(cat "$pidfile"), master $master, log $home/server.log)"
}

down() {
  if ! is_running; then echo "connect: not running"; rm -f "$pidfile"; return 0; fi
  local pid; pid=$(cat "$pidfile")
  kill "$pid"
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$pidfile"
  echo "connect: stopped"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) if is_running; then echo "connect: running at $url (pid $(cat "$pidfile"))"; else echo "connect: not running"; exit 1; fi ;;
  env) echo "SPARK_CONNECT_URL=$url" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
