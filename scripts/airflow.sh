#!/usr/bin/env bash
# `make airflow` / `make airflow-down`: a real local Airflow 3 — api-server, scheduler (LocalExecutor),
# dag-processor and triggerer — on a private PostgreSQL (scripts/postgres.sh), with the Kafka broker,
# the demo pipeline (dags/pipelines) and the Tidemark page. Scheduled runs are the scheduler's.
# EXECUTOR=celery (`make airflow EXECUTOR=celery`): the CeleryExecutor instead, with Redis as its broker
# (scripts/redis.sh) and CELERY_WORKERS (2) Celery workers, each with a folder and an AIRFLOW_HOME of its own
# ($AIRFLOW_LOCAL_HOME/workers/worker-<i>: its env.sh, task logs, temporary files, pid and log), sharing
# nothing with the others but PostgreSQL, Kafka and the lake.
#   scripts/airflow.sh up | down | status | launcher | worker-up I | worker-down I
# `launcher` prints the `spark:` line `up` would print: which launcher the stack's batches get (below).
# `worker-up I` / `worker-down I` start and stop Celery worker I alone (`worker-up` passes its caller's
# environment on to that worker only).
# Environment: AIRFLOW_PORT (8080), PG_PORT (5433), KAFKA_PORT (9092; a broker already listening there
# is used as it is, else scripts/kafka.sh starts one), KAFKA_HOME (the data, logs and pid of a broker `up`
# starts: the checkout's .cache/kafka-<KAFKA_PORT>, also when AIRFLOW_LOCAL_HOME points elsewhere; set it
# with AIRFLOW_LOCAL_HOME to keep a second stack's broker apart), AIRFLOW_LOCAL_HOME (.cache/airflow-local:
# config, logs, pids, PostgreSQL, the logins), AIRFLOW_USER (admin; the login `up` prints, with Airflow's admin role),
# AIRFLOW_VIEWERS (more logins, space-separated, with the viewer role: they see, never trigger), and
# everything scripts/env.sh reads (lake, pipelines). Each login's password is generated once and kept in
# $AIRFLOW_LOCAL_HOME/passwords.json; `up` prints the admin's. With EXECUTOR=celery also: REDIS_PORT (6380),
# REDIS_HOME ($AIRFLOW_LOCAL_HOME/redis), CELERY_WORKER_CONCURRENCY (1 task at a time per worker),
# CELERY_LOG_PORT (8793: worker i serves its task logs on CELERY_LOG_PORT+i-1; the UI asks the first).
# EXECUTOR=celery installs Debian's redis-server system-wide (apt-get, with sudo when not root) when
# `redis-server` or `redis-cli` is missing (scripts/redis.sh install; `make redis` does it ahead); the server
# it starts is a private one on REDIS_PORT, no system service.
# `up` creates, on the broker of KAFKA_PORT (also one that was already running), a topic of 3 partitions for
# every topic listed by a pipeline file of the pipelines folder (TIDEMARK_PIPELINES_DIR, default dags/pipelines),
# unless it exists, so that each pipeline's first scheduled run finds its topic; a topic_pattern creates none.
# The ingest tasks run on the warm path by default: `up` starts a Spark Connect server (scripts/connect.sh, on
# CONNECT_PORT, 15002), or uses the one of this checkout already running there, and points the `spark_default`
# connection at it (in env.sh); `up` again starts it again if it stopped, `status` shows it, `down` stops it if
# `up` started it. LAUNCHER=submit: no server, each batch a spark-submit JVM (the connection's default). A
# Spark connection of your own in AIRFLOW_CONN_SPARK_DEFAULT wins over both.
# `down` stops whatever `up` started, whichever executor it ran.
# `source $AIRFLOW_LOCAL_HOME/env.sh` points the `airflow` and `tidemark` CLIs at this Airflow.
set -euo pipefail
source "$(dirname "$0")/lib/service.sh"
cd "$root"
export AIRFLOW_HOME=${AIRFLOW_LOCAL_HOME:-$root/.cache/airflow-local}
# The caller's own Spark connection, if any, before scripts/env.sh fills in its spark-submit default (which, from
# a shell that sourced scripts/env.sh, is no choice of the caller's either)
callers_spark=${AIRFLOW_CONN_SPARK_DEFAULT:-}
source scripts/env.sh
port=${AIRFLOW_PORT:-8080}
export PG_PORT=${PG_PORT:-5433}
export PG_HOME=${PG_HOME:-$AIRFLOW_HOME/postgres}
user=${AIRFLOW_USER:-admin}
users=$user:admin  # Airflow's name:role list
for viewer in ${AIRFLOW_VIEWERS:-}; do users+=",$viewer:viewer"; done
services=(api-server scheduler dag-processor triggerer)
pids=$AIRFLOW_HOME/pids
logs=$AIRFLOW_HOME/logs/services
executor=${EXECUTOR:-local}
parallelism=4  # [core] parallelism: the tasks that run at once, all DAGs together
case $executor in
  local|LocalExecutor) executor=LocalExecutor ;;
  celery|CeleryExecutor) executor=CeleryExecutor ;;
  *) echo "airflow: EXECUTOR=$executor is not an executor of this stack; use local (the default) or celery" >&2; exit 2 ;;
esac
export REDIS_PORT=${REDIS_PORT:-6380}
export REDIS_HOME=${REDIS_HOME:-$AIRFLOW_HOME/redis}
workers_home=$AIRFLOW_HOME/workers
log_port=${CELERY_LOG_PORT:-8793}
launcher=${LAUNCHER:-connect}
case $launcher in
  connect|submit) ;;
  *) echo "airflow: LAUNCHER=$launcher is not a launcher of this stack; use connect (the default: a Spark Connect" \
          "server for every batch) or submit (a spark-submit JVM per batch)" >&2; exit 2 ;;
esac
export CONNECT_PORT=${CONNECT_PORT:-15002}
warm_connection="{\"conn_type\": \"spark_connect\", \"host\": \"127.0.0.1\", \"port\": $CONNECT_PORT}"
warm= spark_summary= connect_pid=  # set by `up` (spark_up)
service=airflow logfile=$logs sessions=1  # each service with its task processes in a process group

write_env() {  # the one environment every service and CLI call of this Airflow shares
  mkdir -p "$AIRFLOW_HOME" "$pids" "$logs"
  if [ ! -f "$AIRFLOW_HOME/secrets.env" ]; then  # kept across restarts, so logins and sessions survive
    umask 077
    printf 'export AIRFLOW__API_AUTH__JWT_SECRET=%s\nexport AIRFLOW__API__SECRET_KEY=%s\n' \
      "$(python -c 'import secrets; print(secrets.token_hex(32))')" \
      "$(python -c 'import secrets; print(secrets.token_hex(32))')" >"$AIRFLOW_HOME/secrets.env"
  fi
  (umask 077 && python - "$AIRFLOW_HOME/passwords.json" "$users" <<'PY')  # a password for each new login
import json, secrets, sys
from pathlib import Path
path = Path(sys.argv[1])
passwords = json.loads(path.read_text()) if path.exists() else {}
for login in sys.argv[2].split(","):
    passwords.setdefault(login.split(":")[0], secrets.token_urlsafe(12))
path.write_text(json.dumps(passwords))
PY
  cat >"$AIRFLOW_HOME/env.sh" <<ENV
# Written by scripts/airflow.sh: source it to use the airflow and tidemark CLIs against this Airflow.
source "$root/scripts/env.sh"
source "$AIRFLOW_HOME/secrets.env"
export AIRFLOW_HOME="$AIRFLOW_HOME"
export KAFKA_PORT="$KAFKA_PORT"
export TIDEMARK_LAKE_ROOT="$TIDEMARK_LAKE_ROOT"
export TIDEMARK_PIPELINES_DIR="$TIDEMARK_PIPELINES_DIR"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="$(scripts/postgres.sh url)"
export AIRFLOW__CORE__EXECUTOR=$executor
export AIRFLOW__CORE__PARALLELISM=$parallelism
# Airflow's default_pool gets as many slots as the executor has (docs/OPERATIONS.md, "More runs than
# the executor's parallelism"): Airflow 3.3's LocalExecutor does not hold its parallelism, and the
# workloads beyond it filled the pipe to its workers and stalled the scheduler loop.
export AIRFLOW__CORE__DEFAULT_POOL_TASK_SLOT_COUNT=$parallelism
# A task's calls to the execution API wait up to 30 s (Airflow's default is 5 s): on a small machine the
# api-server shares its cores with Spark jobs.
export AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT=30
# The scheduler sleeps this long after a loop that found nothing to do (Airflow's default is 1 s): each
# hand-over of a run (queued -> plan, plan -> ingest, ingest -> the run's end) waits for the next loop
# (docs/OPERATIONS.md, "The scheduler's idle sleep").
export AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME=0.2
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$port/execution/"
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="$port"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$port"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="$users"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$AIRFLOW_HOME/passwords.json"
ENV
  if [ -n "$warm" ]; then
    cat >>"$AIRFLOW_HOME/env.sh" <<ENV
# The warm path: every pipeline's ingest job on the Spark Connect server of scripts/connect.sh (LAUNCHER=submit: none)
export AIRFLOW_CONN_SPARK_DEFAULT='$warm_connection'
ENV
  fi
  if [ "$executor" = CeleryExecutor ]; then
    cat >>"$AIRFLOW_HOME/env.sh" <<ENV
export AIRFLOW__CELERY__BROKER_URL="$(scripts/redis.sh url)"
export AIRFLOW__CELERY__WORKER_CONCURRENCY="${CELERY_WORKER_CONCURRENCY:-1}"
export AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT="$log_port"
ENV
  fi
}

worker_home() { echo "$workers_home/worker-$1"; }

write_worker_env() {  # write_worker_env I: worker I's own copy of the settings, with its own home and temp folder
  local home; home=$(worker_home "$1")
  mkdir -p "$home/tmp" "$home/logs"
  (umask 077 && cp "$AIRFLOW_HOME/secrets.env" "$home/secrets.env")  # its log server checks the UI's tokens
  sed -e "s|^source \"$AIRFLOW_HOME/secrets.env\"|source \"$home/secrets.env\"|" \
      -e "s|^export AIRFLOW_HOME=.*|export AIRFLOW_HOME=\"$home\"|" "$AIRFLOW_HOME/env.sh" >"$home/env.sh"
  cat >>"$home/env.sh" <<ENV
# Celery worker $1: its task logs, temporary files (TMPDIR) and log server port are its own.
export TMPDIR="$home/tmp"
export AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT="$((log_port + $1 - 1))"
ENV
}

healthy() {  # healthy [answering]: the api-server answers / the metadata DB and the scheduler are healthy
  python - "$port" "${1:-}" <<'PY'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/v2/monitor/health", timeout=5) as r:
        health = json.load(r)
except Exception:
    sys.exit(1)
sys.exit(0 if sys.argv[2] == "answering" or (health.get("metadatabase", {}).get("status") == "healthy"
         and health.get("scheduler", {}).get("status") == "healthy") else 1)
PY
}

start() {  # a service, unless it runs; either way a member whose exit fails `up`
  local args=("$1") pidfile=$pids/$1.pid logfile=$logs/$1.log
  members+=("$pidfile:$logfile")
  service_alive && return
  [ "$1" = api-server ] && args+=(--port "$port" --host 127.0.0.1)
  service_launch "$root" airflow "${args[@]}"
}

worker_up() {  # worker_up I: start Celery worker I (unless it runs) and wait until it takes tasks
  local home pidfile logfile; home=$(worker_home "$1")
  pidfile=$home/worker.pid logfile=$home/worker.log
  members+=("$pidfile:$logfile")
  if ! service_alive; then
    write_worker_env "$1"
    service_launch "$home" bash -c "source '$home/env.sh' && exec airflow celery worker \
      --celery-hostname 'worker-$1@%h' --without-mingle --without-gossip"
  fi
  where="from Celery worker $1 (a 'ready' line in $logfile)" service_wait_ready 180 grep -q " ready\." "$logfile"
}

cmd_worker_up() {
  grep -qs "EXECUTOR=CeleryExecutor" "$AIRFLOW_HOME/env.sh" \
    || { echo "airflow: no Celery stack in $AIRFLOW_HOME; run 'make airflow EXECUTOR=celery' first" >&2; exit 1; }
  worker_up "${1:?usage: $0 worker-up I}"
  echo "airflow: Celery worker $1 running (AIRFLOW_HOME $(worker_home "$1"))"
}

cmd_worker_down() {
  service_stop "$(worker_home "${1:?usage: $0 worker-down I}")/worker.pid" || true
  echo "airflow: Celery worker $1 stopped"
}

spark_choice() {  # which launcher `up` gives the stack's batches: sets warm and spark_summary
  if [ -n "$callers_spark" ] && [ "$callers_spark" != "$warm_connection" ] \
     && [ "$callers_spark" != "$spark_submit_connection" ]; then  # scripts/env.sh's default: no choice of the caller's
    spark_summary="the connection of AIRFLOW_CONN_SPARK_DEFAULT (no Spark Connect server started)"
  elif [ "$launcher" = submit ]; then
    spark_summary="a spark-submit JVM per batch (LAUNCHER=submit)"
  else
    warm=1 spark_summary="the Spark Connect server at sc://127.0.0.1:$CONNECT_PORT (the warm path; LAUNCHER=submit: none)"
  fi
}

cmd_launcher() { spark_choice; echo "spark:     $spark_summary"; }

spark_up() {  # spark_choice, then the warm path's server started in the background (connect_pid) unless it runs
  spark_choice
  [ -n "$warm" ] || return 0
  if [ -f "$AIRFLOW_HOME/.started-connect" ] || ! scripts/connect.sh status >/dev/null 2>&1; then
    mkdir -p "$AIRFLOW_HOME" && echo "$CONNECT_PORT" >"$AIRFLOW_HOME/.started-connect"
    scripts/connect.sh up >"$AIRFLOW_HOME/connect-up.log" 2>&1 &  # beside PostgreSQL's start and the migration
    connect_pid=$!
  else
    echo "connect: using the Spark Connect server at sc://127.0.0.1:$CONNECT_PORT (started before this stack)"
  fi
}

cmd_up() {
  local started=$SECONDS
  if service_listening "$KAFKA_PORT"; then
    echo "kafka: using the broker on 127.0.0.1:$KAFKA_PORT"
  else
    scripts/kafka.sh up
    mkdir -p "$AIRFLOW_HOME" && touch "$AIRFLOW_HOME/.started-kafka"
  fi
  spark_up
  scripts/postgres.sh up
  if [ "$executor" = CeleryExecutor ]; then
    scripts/redis.sh up
    mkdir -p "$AIRFLOW_HOME" && echo "$REDIS_PORT $REDIS_HOME" >"$AIRFLOW_HOME/.started-redis"
  fi
  write_env
  source "$AIRFLOW_HOME/env.sh"
  airflow db migrate >"$AIRFLOW_HOME/migrate.log" 2>&1 \
    || { echo "airflow: 'airflow db migrate' failed; see $AIRFLOW_HOME/migrate.log" >&2; exit 1; }
  # A database made before this setting keeps its pool's old size: set it, while the topics are made.
  airflow pools set default_pool "$parallelism" "Default pool (as many slots as [core] parallelism)" \
    >"$AIRFLOW_HOME/pools.log" 2>&1 &
  local pools=$!
  python - <<'PY'  # every listed topic of the pipelines folder (3 partitions), so each first scheduled run finds it
import os
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError
from tidemark.config.pipeline import load_all
admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{os.environ['KAFKA_PORT']}")
try:
    for config in load_all()[0].values():
        for topic in config.topics or []:
            try:
                admin.create_topics([NewTopic(topic, 3, 1)])
                print(f"kafka: created topic '{topic}' for pipeline '{config.name}'")
            except TopicAlreadyExistsError:
                pass
finally:
    admin.close()
PY
  wait "$pools" || { echo "airflow: 'airflow pools set default_pool' failed; see $AIRFLOW_HOME/pools.log" >&2; exit 1; }
  # The scheduler and the triggerer after the api-server answers: a task queued before the execution API
  # answers fails without running (its supervisor cannot start it), as a first scheduled run did on a
  # loaded 2-core machine. The dag-processor needs only the database.
  start api-server
  start dag-processor
  where="from the api-server at http://127.0.0.1:$port" service_wait_ready 240 healthy answering
  if [ -n "$connect_pid" ]; then  # before the scheduler: a run it starts at once sends its batch there
    wait "$connect_pid" || { cat "$AIRFLOW_HOME/connect-up.log" >&2; echo "airflow: the Spark Connect server did not" \
      "start (above); LAUNCHER=submit runs each batch by spark-submit instead" >&2; exit 1; }
    cat "$AIRFLOW_HOME/connect-up.log"
  fi
  start scheduler
  start triggerer
  where="(a healthy metadata DB and scheduler) at http://127.0.0.1:$port/api/v2/monitor/health" \
    service_wait_ready 240 healthy
  local i workers=""
  if [ "$executor" = CeleryExecutor ]; then
    for i in $(seq 1 "${CELERY_WORKERS:-2}"); do worker_up "$i"; workers+=" worker-$i"; done
  fi
  local password
  password=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
    "$AIRFLOW_HOME/passwords.json" "$user")
  cat <<EOF
airflow: up in $((SECONDS - started)) s on PostgreSQL ($(scripts/postgres.sh url | sed 's/:[^:@]*@/:***@/'))
  UI:        http://127.0.0.1:$port   (Tidemark page: http://127.0.0.1:$port/plugin/tidemark)
  login:     $user / $password
  spark:     $spark_summary
  executor:  $executor${workers:+ (Celery workers:$workers, each in $workers_home/<name>; broker $(scripts/redis.sh url))}
  services:  ${services[*]} (logs in $logs)
  CLI:       source $AIRFLOW_HOME/env.sh
  stop:      make airflow-down
EOF
}

cmd_down() {
  local files=() name
  for name in "${services[@]}"; do files+=("$pids/$name.pid"); done
  files+=("$workers_home"/*/worker.pid)
  service_stop "${files[@]}" || true
  if [ -f "$AIRFLOW_HOME/.started-redis" ]; then
    read -r REDIS_PORT REDIS_HOME <"$AIRFLOW_HOME/.started-redis"
    REDIS_PORT=$REDIS_PORT REDIS_HOME=$REDIS_HOME scripts/redis.sh down
    rm -f "$AIRFLOW_HOME/.started-redis"
  fi
  scripts/postgres.sh down
  if [ -f "$AIRFLOW_HOME/.started-connect" ]; then
    CONNECT_PORT=$(cat "$AIRFLOW_HOME/.started-connect") scripts/connect.sh down
    rm -f "$AIRFLOW_HOME/.started-connect"
  fi
  if [ -f "$AIRFLOW_HOME/.started-kafka" ]; then
    scripts/kafka.sh down
    rm -f "$AIRFLOW_HOME/.started-kafka"
  fi
  echo "airflow: stopped"
}

cmd_status() {
  local code=0 name
  for name in "${services[@]}"; do
    if service_alive "$pids/$name.pid"; then echo "$name: running (pid $(service_pid "$pids/$name.pid"))"
    else echo "$name: stopped"; code=1; fi
  done
  for name in "$workers_home"/*/worker.pid; do
    [ -f "$name" ] || continue
    if service_alive "$name"; then echo "celery $(basename "$(dirname "$name")"): running (pid $(service_pid "$name"))"
    else echo "celery $(basename "$(dirname "$name")"): stopped"; code=1; fi
  done
  scripts/postgres.sh status || code=1
  if [ -f "$AIRFLOW_HOME/.started-connect" ]; then
    CONNECT_PORT=$(cat "$AIRFLOW_HOME/.started-connect") scripts/connect.sh status || code=1
  fi
  if [ -f "$AIRFLOW_HOME/.started-redis" ]; then
    read -r REDIS_PORT REDIS_HOME <"$AIRFLOW_HOME/.started-redis"
    REDIS_PORT=$REDIS_PORT REDIS_HOME=$REDIS_HOME scripts/redis.sh status || code=1
  fi
  return $code
}

service_main "up|down|status|launcher|worker-up I|worker-down I" "$@"
