"""The backlog: a fresh topic filled with JSON order events of a fixed size by Kafka's own
producer perf tool (org.apache.kafka.tools.ProducerPerformance from the broker jars)."""

from __future__ import annotations

import json
import logging
import random
import re
import subprocess
import time
from pathlib import Path

from bench.knobs import ROOT, BenchSettings

log = logging.getLogger("bench")
KAFKA_SH = str(ROOT / "scripts" / "kafka.sh")
DISTINCT_PAYLOADS = 5000


def order_event(i: int, size: int, rng: random.Random) -> str:
    """One JSON order event padded (in a ``note`` field) to exactly ``size`` bytes."""
    event = {"order_id": i, "customer_id": rng.randrange(1, 10**6), "amount": round(rng.uniform(1, 500), 2),
             "currency": rng.choice(["EUR", "USD", "GBP"]), "status": rng.choice(["new", "paid", "shipped"]),
             "created_at": f"2024-01-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z",
             "items": [{"sku": f"SKU-{rng.randrange(10**5):05d}", "qty": rng.randrange(1, 5)}], "note": ""}
    pad = size - len(json.dumps(event, separators=(",", ":")))
    if pad < 0:
        raise ValueError(f"BENCH_RECORD_BYTES={size} is too small for an order event ({size - pad} bytes minimum)")
    event["note"] = "x" * pad
    return json.dumps(event, separators=(",", ":"))


def write_payload_file(path: Path, size: int) -> Path:
    """Distinct events, one a line, that the perf producer picks from at random."""
    rng = random.Random(42)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(order_event(i, size, rng) for i in range(DISTINCT_PAYLOADS)) + "\n")
    return path


def create_topic(settings: BenchSettings, topic: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=settings.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def end_offsets(settings: BenchSettings, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=settings.bootstrap, isolation_level="read_committed")
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def produce(settings: BenchSettings, topic: str, records: int, record_bytes: int, already: int = 0) -> dict:
    """Send ``records`` events of ``record_bytes`` to ``topic`` at full speed; returns what the tool
    reported, after checking that the topic holds exactly that many records (plus ``already``)."""
    payloads = write_payload_file(settings.work / f"payloads-{record_bytes}.txt", record_bytes)
    command = [KAFKA_SH, "run-class", "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
               "--num-records", str(records), "--throughput", "-1", "--payload-file", str(payloads),
               "--producer-props", f"bootstrap.servers={settings.bootstrap}", "acks=1", "linger.ms=20",
               "batch.size=262144", "buffer.memory=67108864", "compression.type=none"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"ProducerPerformance failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    # "2000000 records sent, 123456.7 records/sec (35.32 MB/sec), ..."
    summary = re.search(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)", result.stdout)
    if summary is None:
        raise RuntimeError(f"cannot read ProducerPerformance's summary:\n{result.stdout[-3000:]}")
    offsets = end_offsets(settings, topic)
    if sum(offsets.values()) != records + already:
        raise RuntimeError(f"topic {topic} holds {sum(offsets.values())} records, expected {records + already}")
    return {"topic": topic, "records": records, "record_bytes": record_bytes, "partitions": len(offsets),
            "records_per_partition": offsets, "producer_records_per_second": float(summary.group(2)),
            "producer_mb_per_second": float(summary.group(3))}


def produce_backlog(settings: BenchSettings, topic: str) -> dict:
    """The benchmark's backlog: a fresh topic of BENCH_PARTITIONS partitions, BENCH_RECORDS events."""
    create_topic(settings, topic, settings.partitions)
    started = time.perf_counter()
    produced = produce(settings, topic, settings.records, settings.record_bytes)
    return {**produced, "produce_seconds": round(time.perf_counter() - started, 1)}
