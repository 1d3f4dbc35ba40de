#!/usr/bin/env bash
# `make spark-cluster-up` / `make spark-cluster-down`: a Spark standalone cluster on 127.0.0.1, a master and
# SPARK_WORKERS workers, from the pip-installed pyspark. It ships no sbin/start-master.sh: each daemon is
# `spark-class org.apache.spark.deploy.master.Master` (or `...worker.Worker`), in a process group of its own
# so that `down` also stops the executors a worker started.
#   scripts/spark_cluster.sh up | down | status | env
# `env` prints SPARK_MASTER_URL=spark://127.0.0.1:<port>: a Spark connection with host spark://127.0.0.1 and
# that port sends Tidemark's jobs there (docs/OPERATIONS.md, "A Spark standalone cluster").
# Environment: SPARK_WORKERS (2), SPARK_MASTER_PORT (7077), SPARK_MASTER_WEBUI_PORT (8090; Spark's own 8080
# is `make airflow`'s), SPARK_WORKER_WEBUI_PORT (8091: worker i on 8091+i; 0 lets each pick a free port),
# SPARK_WORKER_CORES (1) and SPARK_WORKER_MEMORY (1g): what each worker offers executors, SPARK_DAEMON_MEMORY
# (256m: each daemon's own heap), SPARK_CLUSTER_HOME (.cache/spark-cluster-<port>: pids, logs, and each
# worker's working folder worker-<i>/, where its executors run), SPARK_CLUSTER_START_TIMEOUT (120 s).
# `up` is idempotent: a live master is left alone, stale pid files are cleared.
set -euo pipefail
source "$(dirname "$0")/lib/service.sh"
# shellcheck source=scripts/env.sh
source "$root/scripts/env.sh"
workers=${SPARK_WORKERS:-2}
port=${SPARK_MASTER_PORT:-7077}
ui_port=${SPARK_MASTER_WEBUI_PORT:-8090}
worker_ui_port=${SPARK_WORKER_WEBUI_PORT:-8091}
home=${SPARK_CLUSTER_HOME:-$root/.cache/spark-cluster-$port}
url=spark://127.0.0.1:$port
service=spark-cluster pidfile=$home/master.pid logfile=$home/master.log sessions=1
where="at $url (web UI http://127.0.0.1:$ui_port)"
start_timeout=${SPARK_CLUSTER_START_TIMEOUT:-120}
# The daemons' heap, Tidemark's Spark logging (quiet Kafka clients) unless the caller has its own.
export SPARK_DAEMON_MEMORY=${SPARK_DAEMON_MEMORY:-256m}
export SPARK_CONF_DIR=${SPARK_CONF_DIR:-$root/plugins/tidemark_spark/conf}

answers() {  # the master's UI reports every worker alive
  python - "$ui_port" "$workers" <<'PY'
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=5) as response:
    sys.exit(0 if json.load(response).get("aliveworkers", 0) >= int(sys.argv[2]) else 1)
PY
}

cmd_env() { echo "SPARK_MASTER_URL=$url"; }

worker_ui() { if [ "$worker_ui_port" = 0 ]; then echo 0; else echo $((worker_ui_port + $1)); fi; }

start_worker() {  # start_worker I: worker I, with a working folder of its own (no worker shares one)
  local pidfile=$home/worker-$1.pid logfile=$home/worker-$1.log dir=$home/worker-$1
  mkdir -p "$dir"
  SPARK_WORKER_DIR=$dir service_launch "$home" "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
    "$url" --host 127.0.0.1 --cores "${SPARK_WORKER_CORES:-1}" --memory "${SPARK_WORKER_MEMORY:-1g}" \
    --work-dir "$dir" --webui-port "$(worker_ui "$1")"
  members+=("$pidfile:$logfile")
}

cmd_up() {
  service_already_up && return 0
  local i started=$SECONDS
  service_port_free "$port" SPARK_MASTER_PORT
  service_port_free "$ui_port" SPARK_MASTER_WEBUI_PORT
  for ((i = 0; i < workers; i++)); do
    if [ "$worker_ui_port" != 0 ]; then service_port_free "$(worker_ui "$i")" SPARK_WORKER_WEBUI_PORT; fi
  done
  service_launch "$home" "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host 127.0.0.1 --port "$port" --webui-port "$ui_port"
  members=("$pidfile:$logfile")
  for ((i = 0; i < workers; i++)); do start_worker "$i"; done
  service_await_start
  echo "spark-cluster: a master and $workers workers ready $where in $((SECONDS - started)) s (logs in $home)"
  echo "spark-cluster: SPARK_MASTER_URL=$url (each worker: ${SPARK_WORKER_CORES:-1} cores, ${SPARK_WORKER_MEMORY:-1g})"
}

cmd_down() {  # the master and every worker a pid file names (whatever SPARK_WORKERS says now)
  local file
  for file in "$pidfile" "$home"/worker-*.pid; do [ -f "$file" ] && members+=("$file:${file%.pid}.log"); done
  service_down
}

service_main "up|down|status|env" "$@"
