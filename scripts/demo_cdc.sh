#!/usr/bin/env bash
# `make demo-cdc`: a keyed table kept current from real PostgreSQL changes through Debezium. Starts the broker
# (scripts/kafka.sh, KAFKA_PORT) and the change data capture stack (scripts/cdc.sh: PostgreSQL on CDC_PG_PORT,
# Kafka Connect with the Debezium PostgreSQL connector), creates the table public.customers, and then, twice:
# changes rows in SQL, runs the pipeline config/demo-cdc/customers.yaml with `tidemark run` (local Spark) and
# prints the Delta table next to PostgreSQL's. The lake is .cache/demo-cdc/lake (DEMO_CDC_LAKE); the
# services keep running (make cdc-down, make kafka-down).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export TIDEMARK_PIPELINES_DIR=$root/config/demo-cdc
export TIDEMARK_LAKE_ROOT=${DEMO_CDC_LAKE:-$root/.cache/demo-cdc/lake}  # not the main demo's lake
source scripts/env.sh
export AIRFLOW_CONN_KAFKA_DEFAULT="{\"conn_type\": \"kafka\", \"extra\": {\"bootstrap.servers\": \"127.0.0.1:$KAFKA_PORT\"}}"
export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'
scripts/kafka.sh up
scripts/cdc.sh up
sql() { scripts/cdc.sh sql "$1" >/dev/null; }
# Spark's and Tidemark's logs (stderr) go to a file, as `make demo`'s do; each command's own summary stays here.
log=$root/.cache/demo-cdc/tidemark.log
mkdir -p "$(dirname "$log")"
: >"$log"
quiet() {
  "$@" 2>>"$log" || { status=$?; echo "demo-cdc: '$*' failed ($status); the last lines of its log ($log):" >&2
                      tail -n 40 "$log" >&2; exit "$status"; }
}
show() {
  echo "--- PostgreSQL public.customers"
  scripts/cdc.sh sql "SELECT id, name, city FROM customers ORDER BY id"
  echo "--- Delta $TIDEMARK_LAKE_ROOT/customers (delta-rs)"
  .venv/bin/python - <<'PY'
import os
from deltalake import DeltaTable
rows = DeltaTable(os.path.join(os.environ["TIDEMARK_LAKE_ROOT"], "customers")).to_pyarrow_table(
    columns=["id", "name", "city", "cdc_op"]).to_pylist()
for row in sorted(rows, key=lambda r: r["id"]):
    print(row, flush=True)
os._exit(0)  # no interpreter teardown: once, under load, delta-rs's runtime aborted it ("terminate called ...")
PY
}
# The demo's lake starts empty and reads the topic from its start: rows of an earlier demo are deleted in SQL
# (DELETE, not DROP or TRUNCATE, which Debezium does not turn into row deletes), so the table ends as PostgreSQL's.
rm -rf "$TIDEMARK_LAKE_ROOT"
sql "CREATE TABLE IF NOT EXISTS customers (id int PRIMARY KEY, name text, city text, updated_at timestamptz DEFAULT now())"
sql "DELETE FROM customers"
sql "INSERT INTO customers (id, name, city) VALUES (1, 'Ada', 'London'), (2, 'Grace', 'New York'), (3, 'Alan', 'Wilmslow')"
sql "UPDATE customers SET city = 'Cambridge' WHERE id = 3"
sleep 3  # Connect writes the changes to Kafka within about a second
echo "demo-cdc: run 1 (3 inserts, 1 update); Spark's log: $log"
quiet .venv/bin/tidemark run customers
show
sql "DELETE FROM customers WHERE id = 2"
sql "UPDATE customers SET name = 'Ada Lovelace' WHERE id = 1"
sql "INSERT INTO customers (id, name, city) VALUES (4, 'Edsger', 'Nuenen')"
sleep 3
echo "demo-cdc: run 2 (1 delete, 1 update, 1 insert); Spark's log: $log"
quiet .venv/bin/tidemark run customers
show
quiet .venv/bin/tidemark audit customers
