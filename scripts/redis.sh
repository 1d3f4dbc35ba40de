#!/usr/bin/env bash
# A private Redis server, the Celery broker of `make airflow EXECUTOR=celery`, on 127.0.0.1 with its data
# under .cache/ (no system service touched).
#   scripts/redis.sh install | up | down | status | wait | url
# Environment: REDIS_PORT (6380, not Redis's 6379: where Debian's own service listens if apt started it),
# REDIS_HOME (.cache/redis-<port>: the append-only file, log, pid).
# `install` (the `make redis` target, a prerequisite of `make test`) installs Debian's redis-server with
# apt-get, system-wide (sudo when not root), when `redis-server` or `redis-cli` is missing; `up` does the
# same. `up` is idempotent: a live server is left alone. The queue survives a restart of the server
# (appendonly, fsync every second). No password: it listens on 127.0.0.1 only; a broker reached over the
# network needs one (and TLS).
set -euo pipefail
source "$(dirname "$0")/lib/service.sh"
port=${REDIS_PORT:-6380}
home=${REDIS_HOME:-$root/.cache/redis-$port}
service=redis pidfile=$home/redis.pid logfile=$home/redis.log where="on 127.0.0.1:$port"
start_timeout=${REDIS_START_TIMEOUT:-30}

cmd_install() {
  if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then return 0; fi
  echo "redis: installing Debian's redis-server with apt-get"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q redis-server >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q redis-server >/dev/null; } \
    || { echo "redis: could not install redis-server; install it and run again" >&2; exit 1; }
  echo "redis: $(redis-server --version | cut -d' ' -f1-3)"
}

answers() { [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; }

cmd_up() {
  service_already_up && return 0
  cmd_install
  service_port_free "$port" REDIS_PORT
  mkdir -p "$home"
  service_launch "$home" redis-server --bind 127.0.0.1 --port "$port" --dir "$home" --daemonize no \
    --save "" --appendonly yes --appendfsync everysec --maxmemory 128mb --maxmemory-policy noeviction
  service_await_start
  echo "redis: ready on 127.0.0.1:$port (pid $(service_pid), data and log in $home)"
}

cmd_url() { echo "redis://127.0.0.1:$port/0"; }

service_main "install|up|down|status|wait|url" "$@"
