"""The demo: produce order events, run the ingest DAG through Airflow twice with new events in
between, then print what happened. Run by `make demo` (scripts/demo.sh sets up the environment)."""

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

from tidemark.config import find_pipeline
from tidemark.ledger import Ledger
from tidemark.settings import ledger_uri
from tidemark_cli.main import main as tidemark_cli

ROOT = Path(__file__).resolve().parents[1]
BOOTSTRAP = f"127.0.0.1:{os.environ.get('KAFKA_PORT', '9092')}"
PIPELINE = "orders"
LOGS = ROOT / ".cache" / "demo"


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def ensure_topic() -> None:
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        admin.create_topics([NewTopic("orders", 3, 1)])
        print("created topic 'orders' with 3 partitions")
    except TopicAlreadyExistsError:
        print("topic 'orders' already exists")
    finally:
        admin.close()


def produce(count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP)
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
    print("  source scripts/env.sh && airflow standalone   # UI on http://localhost:8080 "
          "(login printed at start-up)")
    print("  .venv/bin/tidemark offsets show orders --json")
    print(f"  .venv/bin/python -c \"from deltalake import DeltaTable; "
          f"print(DeltaTable('{config.table_uri}').history(3))\"")
    print("  make kafka-down                               # stop the broker")


def main() -> None:
    say("Kafka topic")
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
