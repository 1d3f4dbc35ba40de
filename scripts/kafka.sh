#!/usr/bin/env bash
# A single-node Apache Kafka broker in KRaft mode on 127.0.0.1, from the jars in .cache/jars/kafka.
#   scripts/kafka.sh up | down | status | wait | run-class MAIN_CLASS ARGS...
# Environment: KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (KAFKA_PORT+1), KAFKA_HOME
# (.cache/kafka-<port>: data, logs, pid), KAFKA_HEAP (512m), KAFKA_START_TIMEOUT (90 s), KAFKA_JVM_OPTS (the
# broker's GC and JIT options; `make test` gives a cheaper pair for a broker that mostly waits: scripts/test.sh).
# A second listener speaks SASL_PLAINTEXT with SCRAM-SHA-512 on KAFKA_SASL_PORT (KAFKA_PORT+2),
# with the user KAFKA_SASL_USER (tidemark) / KAFKA_SASL_PASSWORD (tidemark-local; a local default,
# not a secret; no commas, brackets or quotes); PLAINTEXT stays the inter-broker listener and needs
# no credentials.
# `up` is idempotent: a live broker is left alone, a stale pid file is cleared.
set -euo pipefail
source "$(dirname "$0")/lib/service.sh"
port=${KAFKA_PORT:-9092}
cport=${KAFKA_CONTROLLER_PORT:-$((port + 1))}
sasl_port=${KAFKA_SASL_PORT:-$((port + 2))}
sasl_user=${KAFKA_SASL_USER:-tidemark}
sasl_password=${KAFKA_SASL_PASSWORD:-tidemark-local}
home=${KAFKA_HOME:-$root/.cache/kafka-$port}
jars=${TIDEMARK_JAR_CACHE:-$root/.cache/jars}/kafka
heap=${KAFKA_HEAP:-512m}
start_timeout=${KAFKA_START_TIMEOUT:-90}
service=kafka pidfile=$home/broker.pid logfile=$home/logs/stdout.log where="on 127.0.0.1:$port"
show_logs=("$logfile" "$home/logs/server.log")

classpath() { echo "$jars/*"; }

run_class() {  # run a class from the Kafka jars (the broker's own CLI tools, for example)
  exec java -Xmx256m -cp "$(classpath)" -Dlog4j2.configurationFile="$root/config/kafka-log4j2.yaml" \
    -Dkafka.logs.dir="$home/logs" "$@"
}

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
# the controller's no-op record (it proves the controller alive) every 5 s, not 0.5 s: less CPU at idle
metadata.max.idle.interval.ms=5000
PROPS
}

answers() {  # the broker answers a metadata request
  java -Xmx128m -cp "$(classpath)" -Dlog4j2.configurationFile="$root/config/kafka-log4j2.yaml" \
    -Dkafka.logs.dir="$home/logs/tools" org.apache.kafka.tools.BrokerApiVersionsCommand \
    --bootstrap-server "127.0.0.1:$port"
}

cmd_up() {
  service_already_up && return 0
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
  service_launch "$home" java -Xms"$heap" -Xmx"$heap" ${KAFKA_JVM_OPTS:--XX:+UseG1GC} -cp "$(classpath)" \
    -Dlog4j2.configurationFile="$root/config/kafka-log4j2.yaml" -Dkafka.logs.dir="$home/logs" \
    kafka.Kafka "$home/server.properties"
  service_await_start
  echo "kafka: broker ready on 127.0.0.1:$port (pid $(service_pid), logs in $home/logs)"
  ensure_scram_user
  echo "kafka: SASL_PLAINTEXT (SCRAM-SHA-512) listener on 127.0.0.1:$sasl_port, user '$sasl_user'"
}

cmd_run_class() { run_class "$@"; }

service_main "up|down|status|wait|run-class MAIN_CLASS ARGS..." "$@"
