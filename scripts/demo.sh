#!/usr/bin/env bash
# `make demo`: the main job end to end on the embedded default — a local Kafka broker, local
# Spark, Delta tables on the local disk and Airflow 3 (SQLite metadata DB under .cache/airflow).
# KAFKA_SECURITY=sasl_ssl: the same over TLS — the three-broker cluster (scripts/kafka_cluster.sh,
# left running) read through its SASL_SSL listener (SCRAM-SHA-512, the private CA as PEM text in the
# connection), with its own lake and Airflow home under .cache/demo-sasl_ssl.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
security=${KAFKA_SECURITY:-plaintext} migrate_log=.cache/airflow-migrate.log
case $security in
  plaintext) ;;
  sasl_ssl)
    migrate_log=.cache/demo-sasl_ssl/airflow-migrate.log
    export TIDEMARK_LAKE_ROOT=${TIDEMARK_LAKE_ROOT:-$root/.cache/demo-sasl_ssl/lake}
    export AIRFLOW_HOME=${AIRFLOW_HOME:-$root/.cache/demo-sasl_ssl/airflow}
    mkdir -p "$AIRFLOW_HOME" ;;
  *) echo "demo: KAFKA_SECURITY must be plaintext (the single broker) or sasl_ssl (the TLS cluster), not '$security'" >&2
     exit 2 ;;
esac
source scripts/env.sh
if [ "$security" = sasl_ssl ]; then
  scripts/kafka_cluster.sh up
  # The connection, read from the cluster's files by Python: the password never reaches a command line
  AIRFLOW_CONN_KAFKA_DEFAULT=$(BOOTSTRAP=$(scripts/kafka_cluster.sh bootstrap sasl_ssl) \
    CA=$(scripts/kafka_cluster.sh pem ca) PASSWORD_FILE=$(scripts/kafka_cluster.sh pem sasl-password) python - <<'PY'
import json, os
password = open(os.environ["PASSWORD_FILE"], encoding="ascii").read().strip()
print(json.dumps({"conn_type": "kafka", "extra": {
    "bootstrap.servers": os.environ["BOOTSTRAP"], "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required username="tidemark" '
                        f'password="{password}";',
    "ssl.truststore.type": "PEM", "ssl.truststore.certificates": open(os.environ["CA"], encoding="ascii").read()}}))
PY
  )
  export AIRFLOW_CONN_KAFKA_DEFAULT KAFKA_SECURITY=sasl_ssl
else
  scripts/kafka.sh up
fi
airflow db migrate >"$root/$migrate_log" 2>&1 \
  || { echo "demo: 'airflow db migrate' failed; see $migrate_log" >&2; exit 1; }
exec python scripts/demo.py
