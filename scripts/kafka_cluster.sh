#!/usr/bin/env bash
# Three Apache Kafka brokers in KRaft mode on 127.0.0.1 (each broker also a controller: a 3-voter
# quorum), from the jars in .cache/jars/kafka, with TLS. The single broker (scripts/kafka.sh) stays
# the fast default; this is the cluster of production: replication factor 3, min.insync.replicas=2.
#   scripts/kafka_cluster.sh up | down | status | wait | env | bootstrap KIND | pem NAME
#                            | start-broker N | kill-broker N | run-class MAIN_CLASS ARGS...
# Listeners of broker N (1..3) on KAFKA_CLUSTER_BASE_PORT (27092) + 10*(N-1) + offset:
#   +0 plaintext   PLAINTEXT: inter-broker and local tools
#   +1             the KRaft controller
#   +2 ssl         SSL, server authentication only
#   +3 mtls        SSL with ssl.client.auth=required (the client certificate below)
#   +4 sasl_ssl    SASL_SSL with SCRAM-SHA-512: user KAFKA_CLUSTER_SASL_USER (tidemark), password
#                  KAFKA_CLUSTER_SASL_PASSWORD (read when the certificates are made; random if unset; kept
#                  in $home/tls/sasl-password, printed by `pem sasl-password`; no quotes or brackets)
#   +5 wrong_name  SSL with a broker certificate issued for another name (wrong-name.tidemark.invalid):
#                  for testing that hostname verification refuses it
# `bootstrap KIND` prints one kind's bootstrap servers; `env` prints every kind as
# KAFKA_CLUSTER_<KIND>=... and the files as KAFKA_CLUSTER_<NAME>=PATH (the password's as
# KAFKA_CLUSTER_SASL_PASSWORD_FILE); `pem NAME` prints one path:
#   ca (the private CA), client-cert, client-key (the mTLS client, PKCS#8), sasl-password (a file),
#   untrusted-ca (a CA that signed nothing of the cluster), expired-cert, expired-key (a client
#   certificate of the CA that expired in 2020).
# The CA and certificates are made once with openssl under $home/tls (mode 0700, never committed);
# every certificate of the brokers names 127.0.0.1 and localhost, so hostname verification stays on.
# Environment: KAFKA_CLUSTER_HOME (.cache/kafka-cluster: data, logs, pids, tls),
# KAFKA_CLUSTER_HEAP (384m per broker), KAFKA_CLUSTER_START_TIMEOUT (120 s), KAFKA_CLUSTER_JVM_OPTS (the brokers'
# GC and JIT options; `make test` gives a cheaper pair for brokers that mostly wait: scripts/test.sh).
# `up` is idempotent (live brokers are left alone, missing ones started); `down` stops all three.
set -euo pipefail
source "$(dirname "$0")/lib/service.sh"
base=${KAFKA_CLUSTER_BASE_PORT:-27092}
home=${KAFKA_CLUSTER_HOME:-$root/.cache/kafka-cluster}
jars=${TIDEMARK_JAR_CACHE:-$root/.cache/jars}/kafka
heap=${KAFKA_CLUSTER_HEAP:-384m}
tls=$home/tls
sasl_user=${KAFKA_CLUSTER_SASL_USER:-tidemark}
service=kafka-cluster
where="on 127.0.0.1:$base,$((base + 10)),$((base + 20))"
start_timeout=${KAFKA_CLUSTER_START_TIMEOUT:-120}
BROKERS=(1 2 3)
KINDS=(plaintext ssl mtls sasl_ssl wrong_name)

port() {  # port BROKER KIND
  local offset
  case $2 in plaintext) offset=0 ;; controller) offset=1 ;; ssl) offset=2 ;; mtls) offset=3 ;;
    sasl_ssl) offset=4 ;; wrong_name) offset=5 ;; *) echo "$service: unknown listener kind '$2'" >&2; exit 2 ;; esac
  echo $((base + 10 * ($1 - 1) + offset))
}

bootstrap() {  # bootstrap KIND: 127.0.0.1:PORT of every broker, comma-separated
  local n out=()
  for n in "${BROKERS[@]}"; do out+=("127.0.0.1:$(port "$n" "$1")"); done
  (IFS=,; echo "${out[*]}")
}

pidfile_of() { echo "$home/broker-$1/broker.pid"; }
java_opts() { echo "-Dlog4j2.configurationFile=$root/config/kafka-log4j2.yaml"; }

run_class() {  # a class from the Kafka jars (the brokers' own CLI tools), against this cluster
  exec java -Xmx256m -cp "$jars/*" "$(java_opts)" -Dkafka.logs.dir="$home/logs/tools" "$@"
}

sasl_password() { cat "$tls/sasl-password"; }

# --- the private CA and the certificates ----------------------------------------------------------

sign() {  # sign NAME SUBJECT EXTENSIONS [CA]: NAME.key (PKCS#8, unencrypted) and NAME.pem signed by CA
  local ca=${4:-ca}
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc -keyout "$tls/$1.key" \
    -out "$tls/$1.csr" -subj "$2" 2>/dev/null
  openssl x509 -req -in "$tls/$1.csr" -CA "$tls/$ca.pem" -CAkey "$tls/$ca.key" -CAcreateserial \
    -days 3650 -out "$tls/$1.pem" -extfile <(printf '%b' "$3") 2>/dev/null
  rm -f "$tls/$1.csr"
}

self_signed_ca() {  # self_signed_ca NAME SUBJECT
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc -keyout "$tls/$1.key" \
    -out "$tls/$1.pem" -days 3650 -subj "$2" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

expired_client() {  # a client certificate of the CA valid only in 2020: `openssl ca` takes the dates
  local db; db=$(mktemp -d)
  : >"$db/index.txt"
  printf '[ca]\ndefault_ca=d\n[d]\ndatabase=%s/index.txt\nnew_certs_dir=%s\nserial=%s/serial\npolicy=p\n' \
    "$db" "$db" "$db" >"$db/ca.cnf"
  printf 'default_md=sha256\nunique_subject=no\n[p]\ncommonName=supplied\n[x]\n%b' "$client_ext" >>"$db/ca.cnf"
  echo 1000 >"$db/serial"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc -keyout "$tls/expired-client.key" \
    -out "$db/req.csr" -subj "/CN=tidemark-expired-client" 2>/dev/null
  openssl ca -batch -config "$db/ca.cnf" -extensions x -cert "$tls/ca.pem" -keyfile "$tls/ca.key" \
    -startdate 20200101000000Z -enddate 20200102000000Z -in "$db/req.csr" -out "$tls/expired-client.pem" \
    -notext >/dev/null 2>"$db/err" || { cat "$db/err" >&2; rm -rf "$db"; return 1; }
  rm -rf "$db"
}

leaf_ext() { printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\n%s' "$1" "$2"; }
client_ext=$(leaf_ext clientAuth "")

make_certificates() {  # once: the CA, the brokers' and the clients' certificates (PEM) under $tls
  [ -f "$tls/.complete" ] && return 0
  # New certificates and a new SCRAM password: a new cluster too (its storage holds the old password)
  rm -rf "$tls" "$home"/broker-*/data "$home/cluster.id" && mkdir -p "$tls" && chmod 700 "$tls"
  self_signed_ca ca "/CN=Tidemark local test CA"
  self_signed_ca untrusted-ca "/CN=Tidemark untrusted CA (signs nothing of the cluster)"
  sign broker "/CN=127.0.0.1" "$(leaf_ext serverAuth,clientAuth 'subjectAltName=IP:127.0.0.1,DNS:localhost')"
  sign wrong-name "/CN=wrong-name.tidemark.invalid" \
    "$(leaf_ext serverAuth 'subjectAltName=DNS:wrong-name.tidemark.invalid')"
  sign client "/CN=tidemark-client" "$client_ext"
  expired_client
  # A broker's PEM key store: its key, then its chain
  cat "$tls/broker.key" "$tls/broker.pem" "$tls/ca.pem" >"$tls/broker-keystore.pem"
  cat "$tls/wrong-name.key" "$tls/wrong-name.pem" "$tls/ca.pem" >"$tls/wrong-name-keystore.pem"
  rm -f "$tls/untrusted-ca.key" "$tls"/*.srl
  if [ -n "${KAFKA_CLUSTER_SASL_PASSWORD:-}" ]; then echo "$KAFKA_CLUSTER_SASL_PASSWORD" >"$tls/sasl-password"
  else openssl rand -hex 16 | sed 's/^/tm-scram-/' >"$tls/sasl-password"; fi
  chmod 600 "$tls"/*
  touch "$tls/.complete"
  echo "$service: made a private CA and the broker and client certificates in $tls"
}

# --- the brokers ------------------------------------------------------------------------------------

voters() {
  local n out=()
  for n in "${BROKERS[@]}"; do out+=("$n@127.0.0.1:$(port "$n" controller)"); done
  (IFS=,; echo "${out[*]}")
}

write_config() {  # write_config N
  local n=$1 dir=$home/broker-$1 kind listeners=() advertised=()
  for kind in "${KINDS[@]}"; do
    listeners+=("${kind^^}://127.0.0.1:$(port "$n" "$kind")")
    advertised+=("${kind^^}://127.0.0.1:$(port "$n" "$kind")")
  done
  listeners+=("CONTROLLER://127.0.0.1:$(port "$n" controller)")
  mkdir -p "$dir/data" "$dir/logs"
  sed -e "s|@NODE@|$n|g" -e "s|@VOTERS@|$(voters)|" -e "s|@DATA@|$dir/data|" -e "s|@TLS@|$tls|g" \
      -e "s|@LISTENERS@|$(IFS=,; echo "${listeners[*]}")|" -e "s|@ADVERTISED@|$(IFS=,; echo "${advertised[*]}")|" \
      "$root/config/kafka-cluster.properties" >"$dir/server.properties"
}

format_storage() {  # format_storage N CLUSTER_ID: once per broker, with the SCRAM user
  local dir=$home/broker-$1
  [ -f "$dir/data/meta.properties" ] && return 0
  java -Xmx256m -cp "$jars/*" "$(java_opts)" -Dkafka.logs.dir="$dir/logs" kafka.tools.StorageTool format \
    -t "$2" -c "$dir/server.properties" \
    --add-scram "SCRAM-SHA-512=[name=\"$sasl_user\",password=\"$(sasl_password)\"]" >"$dir/logs/format.log" 2>&1 \
    || { echo "$service: formatting broker $1's storage failed; see $dir/logs/format.log" >&2
         cat "$dir/logs/format.log" >&2; exit 1; }
}

cluster_id() {  # the cluster's id, made once (every broker is formatted with it)
  [ -f "$home/cluster.id" ] || java -cp "$jars/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1 \
    >"$home/cluster.id"
  cat "$home/cluster.id"
}

launch() {  # launch N: start broker N in the background (nothing if it runs)
  local dir=$home/broker-$1
  pidfile=$(pidfile_of "$1") logfile=$dir/logs/stdout.log
  service_alive && return 0
  rm -f "$pidfile"
  service_port_free "$(port "$1" plaintext)" KAFKA_CLUSTER_BASE_PORT
  service_launch "$dir" java -Xms64m -Xmx"$heap" ${KAFKA_CLUSTER_JVM_OPTS:--XX:+UseG1GC -XX:ParallelGCThreads=1 -XX:ConcGCThreads=1} \
    -cp "$jars/*" "$(java_opts)" -Dkafka.logs.dir="$dir/logs" kafka.Kafka "$dir/server.properties"
}

answers() {  # every broker is in the cluster's metadata (registered and unfenced), seen over PLAINTEXT
  local n seen
  for n in "${BROKERS[@]}"; do service_listening "$(port "$n" plaintext)" || return 1; done
  seen=$(java -Xmx96m -XX:TieredStopAtLevel=1 -cp "$jars/*" "$(java_opts)" -Dkafka.logs.dir="$home/logs/tools" \
    org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$(bootstrap plaintext)" 2>/dev/null \
    | grep -c '^127\.0\.0\.1:[0-9]* (id: [0-9]')
  [ "$seen" -eq ${#BROKERS[@]} ]
}

any_exited() {  # service_wait_ready's check: a broker that died while the cluster starts fails it
  local n
  for n in "${BROKERS[@]}"; do
    pidfile=$(pidfile_of "$n")
    if ! service_alive; then
      echo "$service: broker $n exited while starting; last lines of its logs:" >&2
      tail -n 30 "$home/broker-$n/logs/server.log" "$home/broker-$n/logs/stdout.log" >&2 2>/dev/null || true
      return 0
    fi
  done
  return 1
}
service_exited() { any_exited; }
service_show_log() { echo "$service: logs in $home/broker-*/logs" >&2; }

all_pidfiles() { local n; for n in "${BROKERS[@]}"; do pidfile_of "$n"; done; }

cmd_up() {
  [ -d "$jars" ] || { echo "$service: no broker jars in $jars; run make jars" >&2; exit 1; }
  mkdir -p "$home/logs/tools"
  make_certificates
  local n id started=$SECONDS
  id=$(cluster_id)
  local formats=()
  for n in "${BROKERS[@]}"; do write_config "$n"; format_storage "$n" "$id" & formats+=($!); done
  for n in "${formats[@]}"; do wait "$n" || exit 1; done  # formatted side by side: three JVM starts at once
  for n in "${BROKERS[@]}"; do launch "$n"; done
  if ! service_wait_ready "$start_timeout" answers; then
    mapfile -t files < <(all_pidfiles)
    service_stop "${files[@]}" >/dev/null 2>&1 || true
    exit 1
  fi
  echo "$service: 3 brokers ready $where in $((SECONDS - started)) s (logs in $home/broker-*/logs)"
  cmd_env | sed 's/^/  /'
}

cmd_down() {
  local files
  mapfile -t files < <(all_pidfiles)
  # All at once: a broker stopped alone waits for the quorum the others would have left
  if service_stop "${files[@]}"; then echo "$service: stopped"; else echo "$service: not running"; fi
}

cmd_status() {
  local n up=0
  for n in "${BROKERS[@]}"; do
    pidfile=$(pidfile_of "$n")
    if service_alive; then up=$((up + 1)); echo "$service: broker $n running (pid $(service_pid))"
    else echo "$service: broker $n not running"; fi
  done
  [ "$up" -eq ${#BROKERS[@]} ]
}

cmd_wait() { service_wait_ready "$start_timeout" answers; }
cmd_bootstrap() { [ $# -eq 1 ] || { echo "usage: $0 bootstrap ${KINDS[*]// /|}" >&2; exit 2; }; bootstrap "$1"; }

pem_path() {  # pem_path NAME
  case $1 in
    ca) echo "$tls/ca.pem" ;; client-cert) echo "$tls/client.pem" ;; client-key) echo "$tls/client.key" ;;
    sasl-password) echo "$tls/sasl-password" ;; untrusted-ca) echo "$tls/untrusted-ca.pem" ;;
    expired-cert) echo "$tls/expired-client.pem" ;; expired-key) echo "$tls/expired-client.key" ;;
    *) echo "usage: $0 pem ca|client-cert|client-key|sasl-password|untrusted-ca|expired-cert|expired-key" >&2; exit 2 ;;
  esac
}
cmd_pem() { pem_path "${1:-}"; }

cmd_env() {
  local kind name
  for kind in "${KINDS[@]}"; do echo "KAFKA_CLUSTER_${kind^^}=$(bootstrap "$kind")"; done
  for name in ca client-cert client-key untrusted-ca expired-cert expired-key; do
    name_var=${name^^}
    echo "KAFKA_CLUSTER_${name_var//-/_}=$(pem_path "$name")"
  done
  echo "KAFKA_CLUSTER_SASL_PASSWORD_FILE=$(pem_path sasl-password)"
  echo "KAFKA_CLUSTER_SASL_USER=$sasl_user"
}

cmd_start_broker() { launch "${1:?broker number}"; echo "$service: broker $1 started (pid $(service_pid))"; }
cmd_kill_broker() {  # kill -9, for failover tests
  pidfile=$(pidfile_of "${1:?broker number}")
  service_signal KILL "$pidfile"
  while service_alive; do sleep 0.2; done
  rm -f "$pidfile"
  echo "$service: broker $1 killed"
}
cmd_run_class() { run_class "$@"; }

service_main "up|down|status|wait|env|bootstrap KIND|pem NAME|start-broker N|kill-broker N|run-class MAIN_CLASS ARGS..." \
  "$@"
