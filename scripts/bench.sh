#!/usr/bin/env bash
# `make bench`: bench/all_parts.py against a fresh private broker (port BENCH_KAFKA_PORT, default 19292),
# stopped afterwards (the contenders, the DAG under a running scheduler, ledger growth, skew, a profile of the raw path, scale); then the JSON benchmark (bench/typed_json.py, against a fresh broker) unless
# BENCH_SKIP names `json`, and the Avro benchmark (scripts/bench_avro.sh: bench/avro.py against a fresh
# broker and a private Schema Registry) unless BENCH_SKIP names `avro`, and the small-batch warm-path
# benchmark (scripts/bench_small.sh: a private Spark Connect server) unless it names `small`, and the TLS
# benchmark (scripts/bench_tls.sh: SASL_SSL vs PLAINTEXT on a private three-broker cluster) unless it names
# `tls`, each typed benchmark again with no poison (BENCH_POISON_EVERY=0; `json-clean`, `avro-clean` in BENCH_SKIP
# leave them out), and the shared ledger under contention (bench/ledger_contention.py) unless it names `ledger-contention`. Knobs (BENCH_RECORDS, BENCH_RECORD_BYTES, BENCH_REPEATS, ...): bench/all_parts.py, bench/typed_json.py,
# bench/avro.py and bench/tls_cost.py.
# Writes bench/results/bench.json, docs/BENCHMARKS.md, docs/benchmarks.png, bench/results/typed_json.json
# bench/results/avro.json, bench/results/small_batch.json, bench/results/tls.json and
# bench/results/ledger_contention.json and bench/results/audit.json (tidemark audit on 1M and 10M rows, unless
# BENCH_SKIP names `audit`), and bench/results/maintenance.json (1,000 small batches before and after maintenance,
# unless BENCH_SKIP names `maintenance`), and bench/results/fleet.json (scripts/bench_fleet.sh: 50 pipelines, one
# scheduler tick on make airflow's stack vs 50 AvailableNow jobs, on private ports; unless BENCH_SKIP names `fleet`), and bench/results/keyed.json (scripts/bench_keyed.sh: a keyed table, Tidemark's MERGE vs
# AvailableNow with an idempotent foreachBatch MERGE, a replay, 1M vs 5M rows; unless BENCH_SKIP names `keyed`) and
# bench/results/transform.json (bench/transform.py: a derive-and-filter transform vs none; unless it names `transform`) and
# bench/results/protobuf.json (scripts/bench_protobuf.sh: the same records as Avro and as Protobuf, a private Schema
# Registry; unless it names `protobuf`), whose sections and Targets rows `python -m bench.transform --page`,
# `python -m bench.protobuf --page`, `python -m bench.keyed_changes --page` and `python -m bench.history_cost --page` write
# into docs/BENCHMARKS.md after bench.report; bench/results/history.json (scripts/bench_history.sh: a history table
# against a keyed table on the same changes; unless BENCH_SKIP names `history`).
set -euo pipefail
cd "$(dirname "$0")/.."
skipped() { case ",${BENCH_SKIP:-}," in *,"$1",*) return 0 ;; esac; return 1; }
if ! skipped profile && [ ! -x .venv/bin/py-spy ]; then  # the profile part's sampler; a benchmark tool, not in the lock
  .venv/bin/python -m pip install -q --disable-pip-version-check "py-spy==0.4.3"
fi
scripts/with_broker.sh bench "${BENCH_KAFKA_PORT:-19292}" .venv/bin/python -m bench.all_parts
if ! skipped json; then
  scripts/with_broker.sh bench "${BENCH_KAFKA_PORT:-19292}" .venv/bin/python -m bench.typed_json
fi
if ! skipped json-clean; then  # the same with no poison: bench/results/typed_json_clean.json
  BENCH_POISON_EVERY=0 scripts/with_broker.sh bench "${BENCH_KAFKA_PORT:-19292}" .venv/bin/python -m bench.typed_json
fi
if ! skipped avro; then
  scripts/bench_avro.sh
fi
if ! skipped avro-clean; then  # bench/results/avro_clean.json
  BENCH_POISON_EVERY=0 scripts/bench_avro.sh
fi
if ! skipped small; then
  scripts/bench_small.sh
fi
if ! skipped tls; then
  scripts/bench_tls.sh
fi
if ! skipped ledger-contention; then
  .venv/bin/python -m bench.ledger_contention
fi
if ! skipped audit; then
  .venv/bin/python -m bench.audit_scale
fi
if ! skipped maintenance; then
  .venv/bin/python -m bench.maintenance
fi
if ! skipped fleet; then
  scripts/bench_fleet.sh
fi
if ! skipped transform; then  # a derive-and-filter transform vs none: bench/results/transform.json
  scripts/with_broker.sh bench "${BENCH_KAFKA_PORT:-19292}" .venv/bin/python -m bench.transform
fi
if ! skipped protobuf; then  # the same records as Avro and as Protobuf: bench/results/protobuf.json
  scripts/bench_protobuf.sh
fi
if ! skipped keyed; then  # a keyed table: MERGE vs AvailableNow, a replay, 1M vs 5M rows: bench/results/keyed.json
  scripts/bench_keyed.sh
fi
if ! skipped history; then  # a history table against a keyed table on the same changes: bench/results/history.json
  scripts/bench_history.sh
fi
if ! skipped demo; then  # make demo's two DAG runs on a fresh class-data folder: bench/results/demo.json
  scripts/with_broker.sh bench "${BENCH_KAFKA_PORT:-19292}" .venv/bin/python -m bench.demo_runs
fi
# bench.all_parts wrote docs/BENCHMARKS.md before typed_json.json, avro.json, small_batch.json and tls.json were new:
# fold them into bench.json and write the page again (from the stored JSON).
.venv/bin/python -m bench.report
# bench/report.py writes the page without the transform, Protobuf and keyed parts: their sections and Targets rows go
# in afterwards.
.venv/bin/python -m bench.transform --page
.venv/bin/python -m bench.protobuf --page
.venv/bin/python -m bench.keyed_changes --page
exec .venv/bin/python -m bench.history_cost --page
