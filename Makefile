# Tidemark's front door. `make help` lists the targets.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export KAFKA_PORT ?= 9092

.DEFAULT_GOAL := help
.PHONY: help setup venv jars kafka-up kafka-down kafka-cluster-up kafka-cluster-down storage-up storage-down registry-up registry-down demo test test-unit lint soak soak-keyed soak-history chaos bench bench-s3 bench-skew bench-scale bench-profile bench-read-path bench-cds bench-json bench-avro bench-small bench-tls bench-ledger bench-ledger-size bench-audit bench-maintenance bench-fleet bench-page bench-demo bench-keyed bench-history bench-transform bench-protobuf connect-up connect-down airflow airflow-down browser redis lock clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# Processes make starts keep the bytecode they compile (a shell's PYTHONDONTWRITEBYTECODE=1, common in CI images,
# would make every Python process of the test run compile each module it imports again): modules are compiled
# once, on their first import, instead of the whole venv up front (45 s of a fresh clone's setup for 15,700 files,
# most never imported).
unexport PYTHONDONTWRITEBYTECODE
# uv installs the lock's 200 pinned packages from its cache in about 3 s, where pip took 65 s (`make test`
# on a fresh clone installs them every time); pip stays in the venv for the tools that use it. The two
# packages PyPI has as sources only come from wheels built once per user (scripts/source_wheels.sh): uv
# otherwise built them for each fresh clone (29 s of its 64 s here).
UV_VERSION := 0.13.9
$(VENV)/.installed: requirements.lock pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@test -x $(VENV)/bin/uv && $(VENV)/bin/uv --version | grep -q " $(UV_VERSION)" || \
	  $(PY) -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(VENV)/bin/uv pip install -q --python $(PY) --find-links "$$(PY=$(PY) scripts/source_wheels.sh)" \
	  -r requirements.lock
	$(VENV)/bin/uv pip install -q --python $(PY) --no-deps -e .
	@touch $@

venv: $(VENV)/.installed ## create .venv and install the pinned dependencies and tidemark

jars: venv ## fetch the Spark (Kafka source, Delta) and Kafka broker jars from Maven Central, once
	VENV=$(VENV) scripts/fetch_jars.sh

setup: venv jars ## everything the demo and the tests need: venv, jars

kafka-up: jars ## start a single-node KRaft broker on 127.0.0.1:$KAFKA_PORT (idempotent)
	scripts/kafka.sh up

kafka-down: ## stop the local broker
	scripts/kafka.sh down

kafka-cluster-up: jars ## start three KRaft brokers with TLS (SSL, mTLS, SASL_SSL) and a private CA; data, logs, pids and TLS material in KAFKA_CLUSTER_HOME (.cache/kafka-cluster), ports from KAFKA_CLUSTER_BASE_PORT (27092); prints the bootstrap servers per listener (idempotent)
	scripts/kafka_cluster.sh up

kafka-cluster-down: ## stop the three brokers of kafka-cluster-up
	scripts/kafka_cluster.sh down

storage-up: venv ## start a local S3-compatible server (moto, with DynamoDB) on 127.0.0.1:$S3_PORT with the bucket `lake` (idempotent)
	scripts/storage.sh up

storage-down: ## stop the local S3-compatible server (its data is in memory and goes with it)
	scripts/storage.sh down

registry-up: ## start a local Confluent-compatible Schema Registry (Apicurio 3, JDK 21+, downloaded once) on 127.0.0.1:$REGISTRY_PORT (idempotent)
	scripts/registry.sh up

registry-down: ## stop the local Schema Registry (its schemas are in memory and go with it)
	scripts/registry.sh down

connect-up: jars ## start a Spark Connect server (the warm path: no JVM per batch) on 127.0.0.1:$CONNECT_PORT (15002; idempotent)
	scripts/connect.sh up

connect-down: ## stop the Spark Connect server
	scripts/connect.sh down

.PHONY: cdc-up cdc-down demo-cdc
cdc-up: kafka-up ## start PostgreSQL (db `shop`, wal_level=logical) on 127.0.0.1:$CDC_PG_PORT (15432) and Kafka Connect with the Debezium PostgreSQL connector (REST $CDC_CONNECT_PORT, 18083) into the broker on $KAFKA_PORT (started too); topics cdc.public.<table> (idempotent; scripts/cdc.sh)
	scripts/cdc.sh up

cdc-down: ## stop Kafka Connect and the CDC PostgreSQL (their data stays in .cache/cdc-<CDC_PG_PORT>; the broker keeps running)
	scripts/cdc.sh down

.PHONY: spark-cluster-up spark-cluster-down
spark-cluster-up: venv ## start a Spark standalone master and $SPARK_WORKERS (2) workers on 127.0.0.1 (spark://127.0.0.1:$SPARK_MASTER_PORT, 7077; idempotent)
	scripts/spark_cluster.sh up

spark-cluster-down: ## stop the Spark standalone master and its workers (and their executors)
	scripts/spark_cluster.sh down

demo: setup ## set everything up and run the demo pipeline end to end through Airflow (KAFKA_SECURITY=sasl_ssl: over TLS on the three-broker cluster)
	scripts/demo.sh

demo-cdc: setup ## a keyed table kept current from real PostgreSQL changes: the broker, PostgreSQL and Kafka Connect with Debezium (make cdc-up), SQL inserts, updates and deletes, two `tidemark run`s of config/demo-cdc/customers.yaml, the Delta table printed beside PostgreSQL's
	scripts/demo_cdc.sh

browser: ## Debian's chromium and chromedriver for the browser tests (apt-get, when missing)
	scripts/browser.sh

redis: ## Debian's redis-server, the Celery broker of `make airflow EXECUTOR=celery` and its tests (apt-get, when missing)
	scripts/redis.sh install

test: setup browser redis ## set everything up, start the broker, run unit, integration, e2e and browser tests
	scripts/test.sh

test-unit: venv ## fast tests that need no service: unit tests and the DAG-integrity tests (TEST_WORKERS=2 processes; 0: one)
	$(PY) -m pytest -q -m unit -n $${TEST_WORKERS:-2} --dist loadfile tests/unit tests/dags

soak: setup ## kill -9 and concurrent-run trials with exactly-once checks (SOAK_TRIALS=20, SOAK_LAKE=s3 for the lake on the local S3 server; not in make test)
	scripts/soak.sh

soak-keyed: setup ## generated keyed-table cases against the reference model (tests/keyed_model.py) through a private broker, Spark and Delta: KEYED_CASES (500), KEYED_SEED (random, printed), KEYED_BATCHES (4), KEYED_SHRINK=1 to shrink a failure; prints count, seed and time (not in make test)
	scripts/soak_keyed.sh

soak-history: setup ## generated history-table cases (keyed.history: scd2) against the model of the versions (tests/history_model.py), as soak-keyed: HISTORY_CASES (200), HISTORY_SEED (random, printed), HISTORY_BATCHES (4), HISTORY_SHRINK=1 (not in make test)
	scripts/soak_keyed.sh history

chaos: setup redis ## CHAOS_FAULTS (100) random faults (Celery worker, Spark driver and worker, S3, PostgreSQL, Kafka) into DAG runs on the Celery stack, standalone Spark and S3; exactly-once checked; bench/results/chaos.json, docs/chaos.png (CHAOS_TIMEOUT=4500 s; not in make test)
	scripts/chaos.sh

lint: venv ## ruff, and the import contracts (the core imports no adapter, no Airflow; no import loops: lint-imports)
	scripts/lint.sh

bench: setup ## Tidemark vs AvailableNow, plain batch, consumer perf; the DAG under a running scheduler; ledger growth; skew; a profile of the raw path; scale; then bench-json, bench-avro, bench-small, bench-tls, bench-ledger, bench-fleet, bench-transform, bench-protobuf, bench-keyed, bench-demo (BENCH_SKIP leaves parts out); not in make test
	scripts/bench.sh

bench-s3: setup ## one batch (BENCH_RECORDS=2000000) to the local disk vs to the local S3 server; bench/results/object_storage.json
	scripts/bench_s3.sh

bench-skew: setup ## a backlog with 80% on one partition, read with and without splitting long ranges; bench/results/skew.json
	scripts/with_broker.sh bench $${BENCH_KAFKA_PORT:-19292} .venv/bin/python -m bench.skew

bench-scale: setup ## one batch of 2M, 6M and 12M records (BENCH_SCALE_SIZES): throughput and driver memory per size; bench/results/scale.json
	scripts/with_broker.sh bench $${BENCH_KAFKA_PORT:-19292} .venv/bin/python -m bench.scale

bench-profile: setup ## the raw-value job next to the plain batch under py-spy and Spark's event log: where the time goes; bench/results/profile.json
	[ -x .venv/bin/py-spy ] || .venv/bin/python -m pip install -q --disable-pip-version-check "py-spy==0.4.3"
	scripts/with_broker.sh bench $${BENCH_KAFKA_PORT:-19292} .venv/bin/python -m bench.profile_raw

bench-read-path: setup ## Spark's V1 Kafka relation vs the V2 scan Tidemark reads through, one JVM taking turns (BENCH_RECORDS=2000000); bench/results/read_path.json
	scripts/with_broker.sh bench $${BENCH_KAFKA_PORT:-19292} .venv/bin/python -m bench.read_path

bench-cds: setup ## the ingest job with and without class-data sharing, batches of 10,000 and 2M records (BENCH_CDS_SIZES), taking turns; bench/results/class_data.json
	scripts/with_broker.sh bench $${BENCH_KAFKA_PORT:-19292} .venv/bin/python -m bench.class_data_sharing

bench-json: setup ## JSON values with a declared schema (BENCH_JSON_RECORDS=1000000, 0.1% poison): Tidemark vs AvailableNow and a plain batch with from_json; bench/results/typed_json.json
	scripts/with_broker.sh bench $${BENCH_KAFKA_PORT:-19292} .venv/bin/python -m bench.typed_json

bench-transform: setup ## a derive-and-filter SQL transform vs the same JSON pipeline without it (BENCH_TRANSFORM_RECORDS=1000000, 0.1% poison); bench/results/transform.json
	scripts/with_broker.sh bench $${BENCH_KAFKA_PORT:-19292} .venv/bin/python -m bench.transform

bench-protobuf: setup ## the same order records as Avro and as Protobuf (BENCH_PROTOBUF_RECORDS=300000, 0.1% poison), both from a private Schema Registry, ingested by Tidemark taking turns: the Protobuf/Avro throughput ratio; bench/results/protobuf.json
	scripts/bench_protobuf.sh

bench-avro: setup ## Avro values (BENCH_AVRO_RECORDS=1000000): Tidemark vs AvailableNow with from_avro, from_avro vs fastavro; a private Schema Registry; bench/results/avro.json
	scripts/bench_avro.sh

bench-small: setup ## a 10,000-record batch (BENCH_SMALL_RECORDS) by spark-submit vs on the warm path (a Spark Connect server); bench/results/small_batch.json
	scripts/bench_small.sh

bench-tls: setup ## the raw ingest job over SASL_SSL vs PLAINTEXT on a private three-broker cluster (BENCH_TLS_RECORDS=1000000, ports from BENCH_KAFKA_CLUSTER_BASE_PORT=30092); bench/results/tls.json
	scripts/bench_tls.sh

bench-ledger: venv ## the shared ledger under contention: 50 pipelines freezing and committing at once, and plan + commit at 100 pipelines x 10,000 batches vs 10 x 10 (no Kafka, no Spark); bench/results/ledger_contention.json
	.venv/bin/python -m bench.ledger_contention

bench-ledger-size: venv ## the ledger's bytes on disk at 1,000 to 100,000 entries of one pipeline, what each entry adds and what VACUUM frees (SIZES, SAMPLE; no Kafka, no Spark); bench/results/ledger_size.json
	$(PY) -m bench.ledger_size

bench-audit: venv ## tidemark audit on output tables of 1M and 10M rows (BENCH_AUDIT_SIZES) with their ledger and dead letters: seconds and peak memory (no Kafka, no Spark); bench/results/audit.json
	.venv/bin/python -m bench.audit_scale

bench-maintenance: venv ## 1,000 small batches into one table (direct Delta appends, the ingest job's layout): files and full-table read time before and after tidemark's maintenance (no Kafka, no Spark); bench/results/maintenance.json
	.venv/bin/python -m bench.maintenance

bench-fleet: setup ## a fleet of 50 pipelines x 10,000 records (BENCH_FLEET_PIPELINES, BENCH_FLEET_RECORDS), one scheduler tick on make airflow's stack, warm path and spark-submit, vs 50 AvailableNow jobs one after another and 4 at a time; bench/results/fleet.json
	scripts/bench_fleet.sh

bench-demo: setup ## make demo's two DAG runs as on a fresh clone (a new class-data folder, Airflow home and lake; a private broker): each run's seconds and whether its ingest task waited for a class-data archive; bench/results/demo.json
	scripts/with_broker.sh bench $${BENCH_KAFKA_PORT:-19292} .venv/bin/python -m bench.demo_runs

bench-page: setup ## the Tidemark page's response time as the ledger grows to 10,000 batches; bench/results/console.json
	scripts/with_broker.sh bench $${BENCH_KAFKA_PORT:-19292} .venv/bin/python -m bench.console_latency

bench-keyed: setup ## a keyed table: 2M changes over 200,000 keys into 1M rows (BENCH_KEYED_CHANGES, BENCH_KEYED_KEYS, BENCH_KEYED_TABLE_ROWS), Tidemark's MERGE batch vs AvailableNow with an idempotent foreachBatch MERGE, a replay of the whole range, the same changes into 5M rows (BENCH_KEYED_BIG_ROWS); a private broker on BENCH_KEYED_KAFKA_PORT (19492); BENCH_KEYED_RESUME=1 continues a stopped run; bench/results/keyed.json
	scripts/bench_keyed.sh

bench-history: setup ## a history table (keyed.history: scd2) against a plain keyed table on the same changes (BENCH_HISTORY_KEYS=200000, BENCH_HISTORY_CHANGES=1000000; private broker on 19492): bench/results/history.json, reported
	scripts/bench_history.sh

EXECUTOR ?= local
LAUNCHER ?= connect
airflow: setup ## a real local Airflow 3 on PostgreSQL (api-server, scheduler, dag-processor, triggerer) with the broker, the demo pipeline and a Spark Connect server for the batches (the warm path; LAUNCHER=submit: a spark-submit JVM per batch); prints the URL and the login. EXECUTOR=celery: the CeleryExecutor, Redis (apt-get installs redis-server when missing) and two Celery workers. Creates a 3-partition topic per listed topic of every pipeline file; a broker it starts keeps its data in .cache/kafka-<KAFKA_PORT> unless KAFKA_HOME says otherwise (scripts/airflow.sh)
	EXECUTOR=$(EXECUTOR) LAUNCHER=$(LAUNCHER) scripts/airflow.sh up

airflow-down: ## stop what `make airflow` started (Airflow's services, Celery workers and Redis, PostgreSQL, the Spark Connect server and the broker if it started them)
	scripts/airflow.sh down

lock: ## re-resolve requirements.txt into requirements.lock in a scratch venv
	rm -rf .cache/lockvenv && python3 -m venv .cache/lockvenv
	.cache/lockvenv/bin/pip install -q -r requirements.txt
	{ echo '# Generated by `make lock` from requirements.txt: the full resolved set, installed by `make setup`.'; \
	  .cache/lockvenv/bin/pip freeze; } > requirements.lock

clean: kafka-down kafka-cluster-down ## stop the broker and the cluster, remove local state (lake, Airflow home); keeps .venv and jars
	rm -rf lake .cache/airflow .cache/kafka-* .cache/demo-sasl_ssl
