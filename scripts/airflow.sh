#!/usr/bin/env bash
# `make airflow` / `make airflow-down`: a real local Airflow 3 — api-server, scheduler (LocalExecutor),
# dag-processor and triggerer — on a private PostgreSQL (scripts/postgres.sh), with the Kafka broker,
# the demo pipeline (dags/pipelines) and the Tidemark page. Scheduled runs are the scheduler's.
#   scripts/airflow.sh up | down | status
# Environment: AIRFLOW_PORT (8080), PG_PORT (5433), KAFKA_PORT (9092; a broker already listening there
# is used as it is, else scripts/kafka.sh starts one), AIRFLOW_LOCAL_HOME (.cache/airflow-local: config,
# logs, pids, the logins), AIRFLOW_USER (admin; the login `up` prints, with Airflow's admin role),
# AIRFLOW_VIEWERS (more logins, space-separated, with the viewer role: they see, never trigger), and
# everything scripts/env.sh reads (lake, pipelines). Each login's password is generated once and kept in
# $AIRFLOW_LOCAL_HOME/passwords.json; `up` prints the admin's.
# `source $AIRFLOW_LOCAL_HOME/env.sh` points the `airflow` and `tidemark` CLIs at this Airflow.
set -euo pipefail
source "$(dirname "$0")/lib/service.sh"
cd "$root"
export AIRFLOW_HOME=${AIRFLOW_LOCAL_HOME:-$root/.cache/airflow-local}
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
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__CORE__PARALLELISM=4
# A task's calls to the execution API wait up to 30 s (Airflow's default is 5 s): on a small machine the
# api-server shares its cores with Spark jobs.
export AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT=30
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$port/execution/"
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="$port"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$port"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="$users"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$AIRFLOW_HOME/passwords.json"
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

cmd_up() {
  local started=$SECONDS
  if service_listening "$KAFKA_PORT"; then
    echo "kafka: using the broker on 127.0.0.1:$KAFKA_PORT"
  else
    scripts/kafka.sh up
    mkdir -p "$AIRFLOW_HOME" && touch "$AIRFLOW_HOME/.started-kafka"
  fi
  scripts/postgres.sh up
  write_env
  source "$AIRFLOW_HOME/env.sh"
  airflow db migrate >"$AIRFLOW_HOME/migrate.log" 2>&1 \
    || { echo "airflow: 'airflow db migrate' failed; see $AIRFLOW_HOME/migrate.log" >&2; exit 1; }
  python - <<'PY'  # the demo pipeline's topic, so its first scheduled run finds it
import os
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError
from tidemark.config import load_all
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
  # The scheduler and the triggerer after the api-server answers: a task queued before the execution API
  # answers fails without running (its supervisor cannot start it), as a first scheduled run did on a
  # loaded 2-core machine. The dag-processor needs only the database.
  start api-server
  start dag-processor
  where="from the api-server at http://127.0.0.1:$port" service_wait_ready 240 healthy answering
  start scheduler
  start triggerer
  where="(a healthy metadata DB and scheduler) at http://127.0.0.1:$port/api/v2/monitor/health" \
    service_wait_ready 240 healthy
  local password
  password=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
    "$AIRFLOW_HOME/passwords.json" "$user")
  cat <<EOF
airflow: up in $((SECONDS - started)) s on PostgreSQL ($(scripts/postgres.sh url | sed 's/:[^:@]*@/:***@/'))
  UI:        http://127.0.0.1:$port   (Tidemark page: http://127.0.0.1:$port/plugin/tidemark)
  login:     $user / $password
  services:  ${services[*]} (logs in $logs)
  CLI:       source $AIRFLOW_HOME/env.sh
  stop:      make airflow-down
EOF
}

cmd_down() {
  local files=() name
  for name in "${services[@]}"; do files+=("$pids/$name.pid"); done
  service_stop "${files[@]}" || true
  scripts/postgres.sh down
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
  scripts/postgres.sh status || code=1
  return $code
}

service_main "up|down|status" "$@"
