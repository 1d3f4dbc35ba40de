#!/usr/bin/env bash
# A single-node Apache Kafka broker in KRaft mode on 127.0.0.1, from the jars in .cache/jars/kafka.
#   scripts/kafka.sh up | down | status | wait | run-class MAIN_CLASS ARGS...
# Environment: KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (KAFKA_PORT+1), KAFKA_HOME
# (.cache/kafka-<port>: data, logs, pid), KAFKA_HEAP (512m).
# A second listener speaks SASL_PLAINTEXT with SCRAM-SHA-512 on KAFKA_SASL_PORT (KAFKA_PORT+2),
# with the user KAFKA_SASL_USER (tidemark) / KAFKA_SASL_PASSWORD (tidemark-local; a local default,
# not a secret; no commas, brackets or quotes); PLAINTEXT stays the inter-broker listener and needs
# no credentials.
# `up` is idempotent: a live broker is left alone, a stale pid file is cleared.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
port=${KAFKA_PORT:-9092}
cport=${KAFKA_CONTROLLER_PORT:-$((port + 1))}
sasl_port=${KAFKA_SASL_PORT:-$((port + 2))}
sasl_user=${KAFKA_SASL_USER:-tidemark}
sasl_password=${KAFKA_SASL_PASSWORD:-tidemark-local}
home=${KAFKA_HOME:-$root/.cache/kafka-$port}
jars=${TIDEMARK_JAR_CACHE:-$root/.cache/jars}/kafka
pidfile=$home/broker.pid
heap=${KAFKA_HEAP:-512m}

classpath() { echo "$jars/*"; }

run_class() {  # run a class from the Kafka jars (the broker's own CLI tools, for example)
  exec java -Xmx256m -cp "$(classpath)" -Dlog4j2.configurationFile="$root/config/kafka-log4j2.yaml" \
    -Dkafka.logs.dir="$home/logs" "$@"
}

is_running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

# The SASL user's SCRAM credential is written when the storage is formatted; a marker (a hash,
# not the password) tells a later `up` whether the user or password changed since.
scram_marker() { printf '%s\n%s' "$sasl_user" "$sasl_password" | sha256sum | cut -d' ' -f1; }
scram_spec() { echo "SCRAM-SHA-512=[name=\"$sasl_user\",password=\"$sasl_password\"]"; }

ensure_scram_user() {  # for data folders formatted before the SASL listener existed, or a new password
  [ "$(cat "$home/data/.scram-user" 2>/dev/null)" = "$(scram_marker)" ] && return 0
  java -Xmx128m -cp "$(classpath)" -Dlog4j2.configurationFile="$root/config/kafka-log4j2.yaml" \
    -Dkafka.logs.dir="$home/logs/tools" kafka.admin.ConfigCommand --bootstrap-server "127.0.0.1:$port" \
    --alter --entity-type users --entity-name "$sasl_user" \
    --add-config "SCRAM-SHA-512=[iterations=4096,password=$sasl_password]" >"$home/logs/scram.log" 2>&1 \
    || { echo "kafka: creating the SCRAM user '$sasl_user' failed; see $home/logs/scram.log" >&2; return 1; }
  scram_marker >"$home/data/.scram-user"
}

write_config() {
  mkdir -p "$home/data" "$home/logs"
  cat >"$home/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport,SASL_PLAINTEXT://127.0.0.1:$sasl_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_PLAINTEXT://127.0.0.1:$sasl_port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
log.dir=$home/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=5000
log.segment.delete.delay.ms=1000
log.cleaner.backoff.ms=1000
auto.create.topics.enable=false
PROPS
}

wait_ready() {  # until the broker answers a metadata request, or fail loudly
  local deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-90}))
  while [ $SECONDS -lt $deadline ]; do
    if ! is_running; then
      echo "kafka: the broker exited during start-up; last log lines:" >&2
      tail -30 "$home/logs/server.log" "$home/logs/stdout.log" 2>/dev/null >&2
      return 1
    fi
    if java -Xmx128m -cp "$(classpath)" -Dlog4j2.configurationFile="$root/config/kafka-log4j2.yaml" \
        -Dkafka.logs.dir="$home/logs/tools" org.apache.kafka.tools.BrokerApiVersionsCommand \
        --bootstrap-server "127.0.0.1:$port" >/dev/null 2>&1; then
      echo "kafka: broker ready on 127.0.0.1:$port (pid $(cat "$pidfile"), logs in $home/logs)"
      return 0
    fi
    sleep 1
  done
  echo "kafka: the broker did not answer on 127.0.0.1:$port within ${KAFKA_START_TIMEOUT:-90}s; see $home/logs" >&2
  return 1
}

up() {
  if is_running; then echo "kafka: already running on 127.0.0.1:$port (pid $(cat "$pidfile"))"; return 0; fi
  rm -f "$pidfile"
  [ -d "$jars" ] || { echo "kafka: no broker jars in $jars; run scripts/fetch_jars.sh (make setup)" >&2; exit 1; }
  write_config
  if [ ! -f "$home/data/meta.properties" ]; then
    java -Xmx256m -cp "$(classpath)" -Dlog4j2.configurationFile="$root/config/kafka-log4j2.yaml" \
      -Dkafka.logs.dir="$home/logs" kafka.tools.StorageTool format --standalone \
      -t "$(java -cp "$(classpath)" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)" \
      -c "$home/server.properties" --add-scram "$(scram_spec)" >"$home/logs/format.log" 2>&1 \
      || { echo "kafka: formatting storage failed; see $home/logs/format.log" >&2; cat "$home/logs/format.log" >&2; exit 1; }
    scram_marker >"$home/data/.scram-user"
  fi
  nohup java -Xms"$heap" -Xmx"$heap" -XX:+UseG1GC -cp "$(classpath)" \
    -Dlog4j2.configurationFile="$root/config/kafka-log4j2.yaml" -Dkafka.logs.dir="$home/logs" \
    kafka.Kafka "$home/server.properties" >"$home/logs/stdout.log" 2>&1 &
  echo $! >"$pidfile"
  wait_ready
  ensure_scram_user
  echo "kafka: SASL_PLAINTEXT (SCRAM-SHA-512) listener on 127.0.0.1:$sasl_port, user '$sasl_user'"
}

down() {
  if ! is_running; then echo "kafka: not running"; rm -f "$pidfile"; return 0; fi
  local pid; pid=$(cat "$pidfile")
  kill "$pid"
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$pidfile"
  echo "kafka: stopped"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) if is_running; then echo "kafka: running on 127.0.0.1:$port (pid $(cat "$pidfile"))"; else echo "kafka: not running"; exit 1; fi ;;
  wait) wait_ready ;;
  run-class) shift; run_class "$@" ;;
  *) echo "usage: $0 up|down|status|wait|run-class MAIN_CLASS ARGS..." >&2; exit 2 ;;
esac
