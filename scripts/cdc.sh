#!/usr/bin/env bash
# A local change data capture stack: a private PostgreSQL cluster (wal_level=logical) with a database `shop`,
# and Kafka Connect (standalone) running the Debezium PostgreSQL connector (pgoutput) into the local broker.
#   scripts/cdc.sh up | down | status | env | sql "SQL" | connector
# `sql` runs one SQL text against `shop` (psql, ON_ERROR_STOP); `connector` prints the connector's status
# (Connect's REST API). The broker must be up first (`make kafka-up`, at 127.0.0.1:KAFKA_PORT).
# Environment:
#   KAFKA_PORT (9092)              the broker the connector writes to (127.0.0.1:KAFKA_PORT)
#   CDC_PG_PORT (15432)            PostgreSQL on 127.0.0.1
#   CDC_HOME (.cache/cdc-<CDC_PG_PORT>; as root under a private folder, /tmp/tidemark-cdc-<port>-<n>)
#                                  PostgreSQL's data (pgdata/), Connect's offsets file, configs,
#                                  logs (logs/: postgres.log, connect.log, connect.out), pid
#   CDC_CONNECT_PORT (18083)       Kafka Connect's REST API on 127.0.0.1
#   CDC_CONNECT_HEAP (384m)        the worker's heap
#   CDC_PG_USER / CDC_PG_PASSWORD (debezium / debezium-local: a local default, not a secret)
#                                  the cluster's one role (LOGIN REPLICATION; the bootstrap superuser,
#                                  which publication.autocreate.mode=all_tables needs), used by the connector
#                                  and by `sql`
#   CDC_TOPIC_PREFIX (cdc)         topic.prefix: a table's topic is <prefix>.<schema>.<table>
#   CDC_SCHEMA_INCLUDE (public)    schema.include.list
#   CDC_TABLE_INCLUDE ("")         table.include.list (regexes as schema.table, comma-separated); empty:
#                                  every table of the included schemas, also tables created later
#   CDC_PUBLICATION_MODE (all_tables)  publication.autocreate.mode: all_tables (new tables are captured
#                                  without a restart) or filtered (the included tables at the connector's
#                                  start)
#   CDC_SCHEMAS_ENABLE (false)     JsonConverter schemas.enable for keys and values: true wraps each in
#                                  Kafka Connect's {"schema": ..., "payload": ...}
#   CDC_FORMAT (json)              json, or avro: Apicurio's AvroConverter against the Schema Registry at
#                                  CDC_REGISTRY_URL (default http://127.0.0.1:$REGISTRY_PORT/apis/registry/v2,
#                                  REGISTRY_PORT 8081; `make registry-up`), Confluent's wire format, and
#                                  schema.name.adjustment.mode=avro on the connector
#   CDC_START_TIMEOUT (120 s)      how long `up` waits for the connector to stream
# The connector (name tidemark-<prefix>): plugin.name=pgoutput, slot and publication tidemark_<prefix> made
# by the connector, snapshot.mode=initial, tombstones.on.delete=true, decimal.handling.mode=string,
# time.precision.mode=adaptive_time_microseconds; topics are created by Connect (1 partition, RF 1).
# As root, PostgreSQL runs as the unprivileged user `nobody` (it refuses root), like scripts/postgres.sh.
# `up` is idempotent: a live stack is left alone (a warning names settings that differ from its own);
# `down` stops Connect, then PostgreSQL, and keeps CDC_HOME (delete it for a fresh snapshot).
set -euo pipefail
source "$(dirname "$0")/lib/service.sh"
kafka_port=${KAFKA_PORT:-9092}
pg_port=${CDC_PG_PORT:-15432}
home=${CDC_HOME:-$(service_owned_home "$root/.cache/cdc-$pg_port" "cdc-$pg_port")}
connect_port=${CDC_CONNECT_PORT:-18083}
heap=${CDC_CONNECT_HEAP:-384m}
user=${CDC_PG_USER:-debezium}
password=${CDC_PG_PASSWORD:-debezium-local}
db=shop
prefix=${CDC_TOPIC_PREFIX:-cdc}
schema_include=${CDC_SCHEMA_INCLUDE:-public}
table_include=${CDC_TABLE_INCLUDE:-}
publication_mode=${CDC_PUBLICATION_MODE:-all_tables}
schemas_enable=${CDC_SCHEMAS_ENABLE:-false}
format=${CDC_FORMAT:-json}
registry_url=${CDC_REGISTRY_URL:-http://127.0.0.1:${REGISTRY_PORT:-8081}/apis/registry/v2}
jars=${TIDEMARK_JAR_CACHE:-$root/.cache/jars}/connect
slot=tidemark_$(echo "$prefix" | tr -c 'a-zA-Z0-9_\n' '_' | tr 'A-Z' 'a-z')
connector=tidemark-$prefix
rest=http://127.0.0.1:$connect_port
service=cdc pidfile=$home/connect.pid logfile=$home/logs/connect.out where="at $rest (connector $connector)"
start_timeout=${CDC_START_TIMEOUT:-120}
show_logs=("$home/logs/connect.out" "$home/logs/connect.log")

case "$schemas_enable" in true | false) ;; *) echo "cdc: CDC_SCHEMAS_ENABLE is true or false, not '$schemas_enable'" >&2; exit 2 ;; esac
case "$publication_mode" in all_tables | filtered) ;; *) echo "cdc: CDC_PUBLICATION_MODE is all_tables or filtered, not '$publication_mode'" >&2; exit 2 ;; esac
case "$format" in json | avro) ;; *) echo "cdc: CDC_FORMAT is json or avro, not '$format'" >&2; exit 2 ;; esac

pgbin() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$bin" ] || { echo "cdc: no PostgreSQL server binaries in /usr/lib/postgresql; run scripts/postgres.sh up once (it installs Debian's postgresql) or apt-get install postgresql" >&2; exit 1; }
  echo "$bin"
}

as_owner() {  # run a server command as the cluster's owner (nobody, when root)
  if [ "$(id -u)" = 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi
}

pg_running() { [ -f "$home/pgdata/postmaster.pid" ] && as_owner "$(pgbin)/pg_ctl" -D "$home/pgdata" status >/dev/null 2>&1; }

psql_shop() {  # psql_shop ARGS...: psql on `shop` as the stack's role
  PGPASSWORD=$password PGCONNECT_TIMEOUT=5 "$(pgbin)/psql" -h 127.0.0.1 -p "$pg_port" -U "$user" -d "$db" -X -q \
    -v ON_ERROR_STOP=1 "$@"
}

pg_up() {
  local bin; bin=$(pgbin)
  mkdir -p "$home/logs"
  if [ "$(id -u)" = 0 ]; then
    chown nobody "$home" "$home/logs"
    as_owner test -w "$home" || { echo "cdc: the user 'nobody' cannot reach $home (a parent folder is private);" \
      "set CDC_HOME to a folder under a path every user can traverse" >&2; exit 1; }
  fi
  if [ ! -f "$home/pgdata/PG_VERSION" ]; then
    printf '%s\n' "$password" >"$home/pwfile"
    [ "$(id -u)" = 0 ] && chown nobody "$home/pwfile"
    as_owner "$bin/initdb" -D "$home/pgdata" -U "$user" --pwfile="$home/pwfile" --auth=scram-sha-256 \
      -E UTF8 --locale=C.UTF-8 >"$home/logs/initdb.log" 2>&1 \
      || { rm -f "$home/pwfile"; echo "cdc: initdb failed; see $home/logs/initdb.log" >&2; exit 1; }
    rm -f "$home/pwfile"
    # Logical decoding for Debezium (pgoutput is built in); a replication connection from 127.0.0.1 for
    # the stack's role (the default pg_hba.conf allows replication from localhost to every role).
    cat >>"$home/pgdata/postgresql.conf" <<CONF

# scripts/cdc.sh: logical decoding for the Debezium connector; small, local
wal_level = logical
max_replication_slots = 8
max_wal_senders = 8
listen_addresses = '127.0.0.1'
unix_socket_directories = '$home'
shared_buffers = 32MB
max_connections = 40
CONF
  fi
  if ! pg_running; then
    service_port_free "$pg_port" CDC_PG_PORT
    as_owner "$bin/pg_ctl" -D "$home/pgdata" -l "$home/logs/postgres.log" -w -t 60 \
      -o "-p $pg_port -k $home" start >/dev/null \
      || { echo "cdc: PostgreSQL did not start; see $home/logs/postgres.log" >&2; tail -20 "$home/logs/postgres.log" >&2; exit 1; }
  fi
  if ! PGPASSWORD=$password "$bin/psql" -h 127.0.0.1 -p "$pg_port" -U "$user" -d postgres -X -tAc \
      "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
    PGPASSWORD=$password "$bin/createdb" -h 127.0.0.1 -p "$pg_port" -U "$user" "$db"
  fi
  [ "$(psql_shop -tAc 'SHOW wal_level')" = logical ] \
    || { echo "cdc: PostgreSQL on 127.0.0.1:$pg_port does not run with wal_level=logical" >&2; exit 1; }
}

converter_props() {  # converter_props key|value
  if [ "$format" = avro ]; then
    cat <<PROPS
$1.converter=io.apicurio.registry.utils.converter.AvroConverter
$1.converter.apicurio.registry.url=$registry_url
$1.converter.apicurio.registry.auto-register=true
$1.converter.apicurio.registry.find-latest=true
$1.converter.apicurio.registry.as-confluent=true
$1.converter.apicurio.registry.headers.enabled=false
$1.converter.apicurio.registry.use-id=contentId
PROPS
  else
    printf '%s.converter=org.apache.kafka.connect.json.JsonConverter\n%s.converter.schemas.enable=%s\n' "$1" "$1" "$schemas_enable"
  fi
}

write_config() {  # the worker's and the connector's properties, under $home/config
  mkdir -p "$home/config"
  {
    echo "# scripts/cdc.sh: the Kafka Connect standalone worker"
    echo "bootstrap.servers=127.0.0.1:$kafka_port"
    converter_props key
    converter_props value
    echo "offset.storage.file.filename=$home/connect.offsets"
    echo "offset.flush.interval.ms=1000"
    echo "listeners=http://127.0.0.1:$connect_port"
    echo "plugin.path=$jars/plugins"
    # ServiceLoader manifests only: the fastest scan (scripts/fetch_jars.sh adds the one Apicurio's jar lacks)
    echo "plugin.discovery=service_load"
    echo "task.shutdown.graceful.timeout.ms=5000"
  } >"$home/config/worker.properties.new"
  {
    echo "# scripts/cdc.sh: the Debezium PostgreSQL connector"
    echo "name=$connector"
    echo "connector.class=io.debezium.connector.postgresql.PostgresConnector"
    echo "tasks.max=1"
    echo "database.hostname=127.0.0.1"
    echo "database.port=$pg_port"
    echo "database.user=$user"
    echo "database.password=$password"
    echo "database.dbname=$db"
    echo "topic.prefix=$prefix"
    echo "plugin.name=pgoutput"
    echo "slot.name=$slot"
    echo "publication.name=$slot"
    echo "publication.autocreate.mode=$publication_mode"
    echo "schema.include.list=$schema_include"
    [ -z "$table_include" ] || echo "table.include.list=$table_include"
    echo "snapshot.mode=initial"
    echo "tombstones.on.delete=true"
    echo "decimal.handling.mode=string"
    echo "time.precision.mode=adaptive_time_microseconds"
    # Avro names hold letters, digits and _ only: a topic prefix such as cdc-1 would make invalid ones
    [ "$format" != avro ] || echo "schema.name.adjustment.mode=avro"
    echo "topic.creation.default.replication.factor=1"
    echo "topic.creation.default.partitions=1"
  } >"$home/config/connector.properties.new"
}

settings_changed() {  # the freshly rendered config differs from the running one's
  ! cmp -s "$home/config/worker.properties.new" "$home/config/worker.properties" \
    || ! cmp -s "$home/config/connector.properties.new" "$home/config/connector.properties"
}

status_json() { curl -fsS --max-time 5 "$rest/connectors/$connector/status"; }

slot_active() { [ "$(psql_shop -tAc "SELECT active FROM pg_replication_slots WHERE slot_name = '$slot'" 2>/dev/null)" = t ]; }

answers() {  # the connector's task runs and its replication slot streams (a failed task ends the wait)
  local status
  status=$(status_json 2>/dev/null) || return 1
  if grep -q '"state":"FAILED"' <<<"$status"; then
    echo "cdc: the connector failed: $(head -c 3000 <<<"$status")" >&2
    return 2
  fi
  grep -q '"tasks":\[{"id":0,"state":"RUNNING"' <<<"$status" && slot_active
}

await_connector() {
  local deadline=$((SECONDS + start_timeout)) rc
  while true; do
    rc=0; answers >/dev/null || rc=$?
    [ $rc = 0 ] && return 0
    if [ $rc = 2 ] || ! service_alive || [ $SECONDS -ge $deadline ]; then
      [ $rc = 2 ] || { service_alive && echo "cdc: the connector does not stream within ${start_timeout}s" >&2 \
        || echo "cdc: Kafka Connect exited while starting" >&2; }
      service_show_log
      service_stop >/dev/null 2>&1 || true
      exit 1
    fi
    sleep 0.5
  done
}

cmd_up() {
  local started=$SECONDS
  if service_alive; then
    write_config
    if settings_changed; then
      echo "cdc: warning: the running stack has other settings than these (see $home/config);" \
        "run scripts/cdc.sh down, then up, to apply them" >&2
    fi
    rm -f "$home/config/"*.new
    pg_up
    echo "cdc: already running $where (pid $(service_pid))"
    return 0
  fi
  rm -f "$pidfile"
  ls "$jars"/connect-runtime-*.jar "$jars"/plugins/debezium-postgres/debezium-connector-postgres-*.jar >/dev/null 2>&1 \
    || { echo "cdc: no Kafka Connect / Debezium jars in $jars; run scripts/fetch_jars.sh (make jars)" >&2; exit 1; }
  service_listening "$kafka_port" || { echo "cdc: no Kafka broker on 127.0.0.1:$kafka_port; start one first" \
    "(make kafka-up, or KAFKA_PORT=... scripts/kafka.sh up)" >&2; exit 1; }
  service_port_free "$connect_port" CDC_CONNECT_PORT
  if [ "$format" = avro ]; then
    ls "$jars/plugins/apicurio-converter/"apicurio-registry-utils-converter-*.jar >/dev/null 2>&1 \
      || { echo "cdc: CDC_FORMAT=avro needs Apicurio's converter in $jars/plugins/apicurio-converter; run scripts/fetch_jars.sh" >&2; exit 1; }
    curl -fsS -o /dev/null --max-time 5 "$registry_url/system/info" \
      || { echo "cdc: no Schema Registry answers at $registry_url (make registry-up)" >&2; exit 1; }
  fi
  pg_up
  write_config
  echo "cdc: PostgreSQL ready on 127.0.0.1:$pg_port (db $db, wal_level=logical) in $((SECONDS - started)) s"
  mv "$home/config/worker.properties.new" "$home/config/worker.properties"
  mv "$home/config/connector.properties.new" "$home/config/connector.properties"
  local connect_started=$SECONDS
  service_launch "$home" java -Xms64m -Xmx"$heap" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Xss512k -XX:MaxMetaspaceSize=192m -Djava.io.tmpdir="$home" -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$root/config/cdc-connect-log4j2.properties" -Dcdc.logs.dir="$home/logs" \
    -cp "$jars/*" org.apache.kafka.connect.cli.ConnectStandalone \
    "$home/config/worker.properties" "$home/config/connector.properties"
  await_connector
  echo "cdc: Kafka Connect ready at $rest in $((SECONDS - connect_started)) s: connector $connector streams" \
    "(slot $slot, pgoutput) to 127.0.0.1:$kafka_port, topics $prefix.<schema>.<table> (pid $(service_pid), logs in $home/logs)"
  echo "cdc: ready in $((SECONDS - started)) s; CDC_PG_DSN=$(dsn)"
}

dsn() { echo "postgresql://$user:$password@127.0.0.1:$pg_port/$db"; }

cmd_env() {  # what a client needs; the settings of the running stack when there is one
  local bootstrap=127.0.0.1:$kafka_port
  if [ -f "$home/config/worker.properties" ]; then
    bootstrap=$(sed -n 's/^bootstrap.servers=//p' "$home/config/worker.properties")
  fi
  echo "CDC_PG_DSN=$(dsn)"
  echo "CDC_TOPIC_PREFIX=$prefix"
  echo "CDC_CONNECT_URL=$rest"
  echo "CDC_CONNECTOR=$connector"
  echo "CDC_SLOT=$slot"
  echo "CDC_KAFKA_BOOTSTRAP=$bootstrap"
  echo "CDC_SCHEMAS_ENABLE=$schemas_enable"
  echo "CDC_FORMAT=$format"
}

cmd_sql() {
  [ $# -ge 1 ] || { echo "usage: $0 sql \"SQL\"" >&2; exit 2; }
  pg_running || { echo "cdc: PostgreSQL is not running on 127.0.0.1:$pg_port (scripts/cdc.sh up)" >&2; exit 1; }
  psql_shop -c "$1"
}

cmd_connector() { status_json; echo; }

cmd_status() {
  local rc=0
  if pg_running; then echo "cdc: PostgreSQL running on 127.0.0.1:$pg_port (data in $home/pgdata)"
  else echo "cdc: PostgreSQL not running"; rc=1; fi
  if service_alive; then echo "cdc: Kafka Connect running $where (pid $(service_pid)): $(status_json 2>/dev/null || echo 'no answer')"
  else echo "cdc: Kafka Connect not running"; rc=1; fi
  return $rc
}

cmd_down() {
  if service_stop; then echo "cdc: Kafka Connect stopped"; else echo "cdc: Kafka Connect not running"; fi
  if pg_running; then
    as_owner "$(pgbin)/pg_ctl" -D "$home/pgdata" -m fast -w -t 60 stop >/dev/null
    echo "cdc: PostgreSQL stopped (data kept in $home)"
  else
    echo "cdc: PostgreSQL not running"
  fi
}

service_main "up|down|status|env|sql SQL|connector" "$@"
