# Sourced by the scripts of the local services (kafka.sh, storage.sh, registry.sh, connect.sh,
# spark_cluster.sh, airflow.sh, postgres.sh): one life cycle for background processes kept by pid files.
# The script sets, before calling these:
#   service   its name, the prefix of every message ("kafka")
#   pidfile   the pid file of its (main) process
#   logfile   the file its process writes (named in errors; a folder is named, not shown)
#   where     where it answers, for messages ("on 127.0.0.1:9092", "at sc://127.0.0.1:15002")
#   start_timeout  seconds `up` and `wait` give it to answer (the function `answers` checks it)
#   show_logs (optional array) the logs to show when it fails to start, if not logfile
#   members   (optional array) a service of several processes: each as PIDFILE:LOGFILE; a start fails when
#             any of them exits, and a stop stops them all (the single process of pidfile otherwise)
#   sessions  (optional, 1) each process starts in a session of its own and stops with its process group
#             (the children it started too: Airflow's task runners, Spark's executors)
# and defines a function cmd_<command> per command of its usage (cmd_up, cmd_env, ...; cmd_down, cmd_status
# and cmd_wait have defaults below), then ends with `service_main "up|down|status|env" "$@"`.
# One grace policy for every stop: SIGTERM, up to SERVICE_STOP_GRACE seconds (30) to exit, then SIGKILL.
# shellcheck shell=bash
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
show_logs=() members=() sessions=

service_pid() { cat "${1:-$pidfile}" 2>/dev/null; }

service_owned_home() {  # service_owned_home DEFAULT NAME: where a server run as `nobody` keeps its files
  # DEFAULT, unless we are root and `nobody` cannot traverse to DEFAULT's folder (a checkout under a private
  # folder, such as one `mktemp -d` made): then a folder under /tmp named after NAME and this checkout, the same on
  # every call, so that `down` and `status` find what `up` started. A folder the user set is used as given.
  local default=$1 parent
  parent=$(dirname "$default")
  mkdir -p "$parent"
  if [ "$(id -u)" != 0 ] || runuser -u nobody -- test -x "$parent" 2>/dev/null; then echo "$default"; return; fi
  echo "/tmp/tidemark-$2-$(printf %s "$root" | cksum | cut -d' ' -f1)"
}


service_alive() {  # service_alive [PIDFILE]: its process (with sessions=1: any of its process group) is alive
  local pid
  pid=$(service_pid "${1:-$pidfile}") && [ -n "$pid" ] || return 1
  # The process itself counts too: just launched, it may not have made its own session (setsid) yet
  if [ "$sessions" = 1 ]; then kill -0 -- "-$pid" 2>/dev/null || kill -0 "$pid" 2>/dev/null
  else kill -0 "$pid" 2>/dev/null; fi
}

service_signal() {  # service_signal SIGNAL PIDFILE: to its process, or with sessions=1 its process group
  local target
  target=$(service_pid "$2") || return 0
  if [ "$sessions" = 1 ]; then target=-$target; fi
  kill "-$1" -- "$target" 2>/dev/null || true
}

service_listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }  # something answers on 127.0.0.1:PORT

service_port_free() {  # service_port_free PORT VARIABLE: fail, naming the port and the setting, if it is taken
  if service_listening "$1"; then
    echo "$service: something else already listens on 127.0.0.1:$1; set $2 to a free port" >&2
    exit 1
  fi
}

service_already_up() {  # true (and says so) if the service runs; otherwise clears a stale pid file
  if service_alive; then echo "$service: already running $where (pid $(service_pid))"; return 0; fi
  rm -f "$pidfile"
  return 1
}

service_launch() {  # service_launch DIR COMMAND...: start COMMAND in DIR in the background, as pidfile, into logfile
  local setsid=()
  if [ "$sessions" = 1 ]; then setsid=(setsid); fi
  mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"
  (cd "$1" && shift && exec "${setsid[@]}" nohup "$@" >"$logfile" 2>&1 </dev/null) &
  echo $! >"$pidfile"
}

service_show_log() {  # the last lines of the service's logs (logfile, or the array show_logs), or where they are
  local files=("${show_logs[@]:-$logfile}")
  if [ -f "${files[0]}" ]; then
    echo "$service: last lines of ${files[*]}:" >&2
    tail -n 30 "${files[@]}" >&2 2>/dev/null || true
  else
    echo "$service: logs in ${files[*]}" >&2
  fi
}

service_exited() {  # true, after saying which with its log, if a process of the service has exited
  if [ ${#members[@]} -eq 0 ]; then service_exited_one "$pidfile" "$logfile"; return; fi
  local member
  for member in "${members[@]}"; do service_exited_one "${member%%:*}" "${member#*:}" && return 0; done
  return 1
}

service_exited_one() {  # service_exited_one PIDFILE LOGFILE
  local pidfile=$1 logfile=$2
  service_alive && return 1
  echo "$service: $(basename "${pidfile%.pid}") exited while starting" >&2
  service_show_log
}

service_wait_ready() {  # service_wait_ready TIMEOUT COMMAND...: until COMMAND succeeds, a process exits or
  local timeout=$1 deadline=$((SECONDS + $1))  # TIMEOUT seconds pass (both fail, naming what to look at)
  shift
  until "$@" >/dev/null 2>&1; do
    if service_exited; then return 1; fi
    if [ $SECONDS -ge $deadline ]; then
      echo "$service: no answer $where within ${timeout}s" >&2
      service_show_log
      return 1
    fi
    sleep 0.5
  done
}

service_await_start() {  # service_await_start: wait until it answers, else stop what was started and exit
  service_wait_ready "$start_timeout" answers && return 0
  service_stop >/dev/null 2>&1 || true
  exit 1
}

service_stop() {  # service_stop [PIDFILE...]: the grace policy for each (default: the service's); false if none ran
  local files file none=1 member
  files=("$@")
  if [ $# -eq 0 ]; then
    files=("$pidfile")
    if [ ${#members[@]} -gt 0 ]; then files=(); for member in "${members[@]}"; do files+=("${member%%:*}"); done; fi
  fi
  for file in "${files[@]}"; do
    if service_alive "$file"; then none=0; service_signal TERM "$file"; fi
  done
  local deadline=$((SECONDS + ${SERVICE_STOP_GRACE:-30}))
  for file in "${files[@]}"; do
    while service_alive "$file" && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
    if service_alive "$file"; then service_signal KILL "$file"; fi
    rm -f "$file"
  done
  return $none
}

service_down() {  # service_down [NOTE]: stop the service, saying so (NOTE follows "stopped")
  if service_stop; then echo "$service: stopped${1:+ $1}"; else echo "$service: not running"; fi
}

cmd_down() { service_down; }
cmd_wait() { service_wait_ready "$start_timeout" answers; }  # answers: the script's readiness check
cmd_status() {
  if service_alive; then echo "$service: running $where (pid $(service_pid))"; else echo "$service: not running"; exit 1; fi
}

service_main() {  # service_main USAGE "$@": run cmd_<command> for a command USAGE lists ("up|down|run-class ARGS...")
  local usage=$1 command=${2:-} choice choices
  set -- "${@:3}"
  IFS='|' read -ra choices <<<"$usage"
  for choice in "${choices[@]}"; do
    if [ -n "$command" ] && [ "${choice%% *}" = "$command" ]; then "cmd_${command//-/_}" "$@"; return; fi
  done
  echo "usage: $0 $usage" >&2
  exit 2
}
