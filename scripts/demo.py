"""The demo: produce order events, run the ingest DAG through Airflow twice with new events in
between, then print what happened. Run by `make demo` (scripts/demo.sh sets up the environment).
With KAFKA_SECURITY=sasl_ssl (the three-broker cluster over TLS) the producer and the topic's admin use
the Kafka connection the DAG reads (AIRFLOW_CONN_KAFKA_DEFAULT, built by scripts/demo.sh)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from tidemark.config.pipeline import find_pipeline
from tidemark.kafka.client import client_kwargs
from tidemark.ledger.store import Ledger
from tidemark.settings import ledger_uri
from tidemark_cli.main import main as tidemark_cli

ROOT = Path(__file__).resolve().parents[1]
BOOTSTRAP = f"127.0.0.1:{os.environ.get('KAFKA_PORT', '9092')}"
OVER_TLS = os.environ.get("KAFKA_SECURITY", "plaintext") == "sasl_ssl"
PIPELINE = "orders"
LOGS = Path(os.environ.get("TIDEMARK_DEMO_LOGS", ROOT / ".cache" / ("demo-sasl_ssl/logs" if OVER_TLS else "demo")))
"""Where each DAG run's log goes (TIDEMARK_DEMO_LOGS: elsewhere, for bench/demo_runs.py)."""


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def kafka() -> dict:
    """kafka-python's arguments: the single broker, or over TLS the Kafka connection the DAG reads."""
    if not OVER_TLS:
        return {"bootstrap_servers": BOOTSTRAP}
    return client_kwargs(json.loads(os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"])


def ensure_topic() -> None:
    admin = KafkaAdminClient(**kafka())
    replicas = 3 if OVER_TLS else 1
    try:
        admin.create_topics([NewTopic("orders", 3, replicas)])
        print("created topic 'orders' with 3 partitions" + (", 3 replicas" if OVER_TLS else ""))
    except TopicAlreadyExistsError:
        print("topic 'orders' already exists")
    finally:
        admin.close()


def produce(count: int) -> None:
    producer = KafkaProducer(**kafka())
    for _ in range(count):
        order_id = random.randrange(10**9)
        event = {"order_id": order_id, "customer": f"c{random.randrange(500)}",
                 "amount": round(random.uniform(5, 500), 2), "created_at": time.time()}
        producer.send("orders", key=str(order_id).encode(), value=json.dumps(event).encode())
    producer.flush()
    producer.close()
    print(f"produced {count} order events to 'orders'")


def run_dag(label: str) -> None:
    LOGS.mkdir(parents=True, exist_ok=True)
    log_file = LOGS / f"{label}.log"
    started = time.monotonic()
    result = subprocess.run(["airflow", "dags", "test", f"tidemark_ingest__{PIPELINE}"],
                            capture_output=True, text=True)
    log_file.write_text(result.stdout + result.stderr)
    finished = re.search(r"DagRun Finished: .*?state=(\w+)", result.stdout + result.stderr)
    state = finished.group(1) if finished else "unknown"
    print(f"DAG run finished: {state} in {time.monotonic() - started:.0f}s (full log: {log_file})")
    if result.returncode != 0 or state != "success":
        print((result.stdout + result.stderr)[-4000:], file=sys.stderr)
        sys.exit(f"demo: the DAG run failed; see {log_file}")


def summary() -> None:
    config = find_pipeline(PIPELINE)
    rows = Ledger(ledger_uri()).rows(PIPELINE)
    batches: dict[int, int] = {}
    for row in rows:
        if row.status == "committed":
            batches[row.batch_id] = batches.get(row.batch_id, 0) + (row.record_count or 0)
    say("records written per batch (from the ledger)")
    for batch_id, count in sorted(batches.items()):
        print(f"  batch {batch_id}: {count} records")
    say("committed offsets and lag per partition (tidemark offsets show orders)")
    tidemark_cli(["offsets", "show", PIPELINE])
    say("where things are")
    print(f"  output table : {config.table_uri}")
    print(f"  offset ledger: {ledger_uri()}")
    print(f"  DAG run logs : {LOGS}")
    print("\nExplore further:")
    print("  make airflow                                  # Airflow on http://localhost:8080 with this pipeline "
          "(the login is printed)")
    print("  then Browse -> Tidemark -> orders             # its lag, records per batch and ledger history")
    print("  .venv/bin/tidemark offsets show orders --json")
    print(f"  .venv/bin/python -c \"from deltalake import DeltaTable; "
          f"print(DeltaTable('{config.table_uri}').history(3))\"")
    if OVER_TLS:
        print("  make kafka-cluster-down                       # stop the three brokers")
        print("  (the CLI and Airflow need the demo's TLS connection: scripts/demo.sh builds it from "
              "scripts/kafka_cluster.sh env; docs/OPERATIONS.md, Kafka over TLS)")
    else:
        print("  make kafka-down                               # stop the broker")


def main() -> None:
    say("Kafka topic" + (" (three brokers, over SASL_SSL)" if OVER_TLS else ""))
    ensure_topic()
    say("run 1: produce 1,000 orders, then run the ingest DAG through Airflow")
    produce(1000)
    run_dag("run1")
    say("run 2: produce 500 more, run again (only the new ones are read)")
    produce(500)
    run_dag("run2")
    summary()


if __name__ == "__main__":
    main()
