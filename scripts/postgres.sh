#!/usr/bin/env bash
# A private PostgreSQL cluster for Airflow's metadata DB, under .cache/ (no system service touched).
#   scripts/postgres.sh up | down | status | url
# Environment: PG_PORT (5433), PG_HOME (.cache/postgres-<port>, or as root under a private folder
# /tmp/tidemark-postgres-<port>-<n>: data, socket, log), PG_USER/PG_PASSWORD/
# PG_DB (airflow/airflow/airflow: a local default on 127.0.0.1, not a secret).
# Debian's `postgresql` is installed with apt-get when no server binaries are found. PostgreSQL refuses
# to run as root, so as root the cluster runs as the unprivileged user `nobody` and owns only PG_HOME.
# `up` is idempotent: a live cluster is left alone; the database is created once.
set -euo pipefail
source "$(dirname "$0")/lib/service.sh"
port=${PG_PORT:-5433}
home=${PG_HOME:-$(service_owned_home "$root/.cache/postgres-$port" "postgres-$port")}
user=${PG_USER:-airflow}
password=${PG_PASSWORD:-airflow}
db=${PG_DB:-airflow}

pgbin() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [ -z "$bin" ]; then
    echo "postgres: no server binaries in /usr/lib/postgresql; installing Debian's postgresql" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-common >/dev/null 2>&1 || true
    # Keep apt from creating and starting the system-wide cluster: only the binaries are wanted.
    mkdir -p /etc/postgresql-common && echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null \
      || { echo "postgres: apt-get install postgresql failed" >&2; exit 1; }
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  echo "$bin"
}

as_owner() {  # run a server command as the cluster's owner
  if [ "$(id -u)" = 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi
}

is_running() { [ -f "$home/data/postmaster.pid" ] && as_owner "$(pgbin)/pg_ctl" -D "$home/data" status >/dev/null 2>&1; }

cmd_up() {
  local bin; bin=$(pgbin)
  mkdir -p "$home"
  if [ "$(id -u)" = 0 ]; then
    chown nobody "$home"
    as_owner test -w "$home" || { echo "postgres: the user 'nobody' cannot reach $home (a parent folder is" \
      "private); set PG_HOME to a folder under a path every user can traverse" >&2; exit 1; }
  fi
  if [ ! -f "$home/data/PG_VERSION" ]; then
    printf '%s\n' "$password" >"$home/pwfile"
    [ "$(id -u)" = 0 ] && chown nobody "$home/pwfile"
    as_owner "$bin/initdb" -D "$home/data" -U "$user" --pwfile="$home/pwfile" --auth=scram-sha-256 \
      -E UTF8 --locale=C.UTF-8 >"$home/initdb.log" 2>&1 \
      || { echo "postgres: initdb failed; see $home/initdb.log" >&2; exit 1; }
    rm -f "$home/pwfile"
  fi
  if ! is_running; then
    as_owner "$bin/pg_ctl" -D "$home/data" -l "$home/server.log" -w -t 60 \
      -o "-p $port -c listen_addresses=127.0.0.1 -k $home -c shared_buffers=64MB -c max_connections=60" start \
      >/dev/null || { echo "postgres: start failed; see $home/server.log" >&2; tail -20 "$home/server.log" >&2; exit 1; }
  fi
  if ! PGPASSWORD=$password "$bin/psql" -h 127.0.0.1 -p "$port" -U "$user" -d postgres -tAc \
      "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
    PGPASSWORD=$password "$bin/createdb" -h 127.0.0.1 -p "$port" -U "$user" "$db"
  fi
  echo "postgres: $(cmd_url) (data in $home)"
}

cmd_down() {
  if is_running; then as_owner "$(pgbin)/pg_ctl" -D "$home/data" -m fast -w stop >/dev/null; fi
  echo "postgres: stopped"
}

cmd_url() { echo "postgresql+psycopg2://$user:$password@127.0.0.1:$port/$db"; }

cmd_status() {
  if is_running; then echo "postgres: running on 127.0.0.1:$port"; else echo "postgres: not running"; exit 1; fi
}

service_main "up|down|status|url" "$@"
