"""Records with explicit Kafka timestamps, so a test sets the times a time-window backfill selects
instead of sleeping between batches of records."""

from __future__ import annotations

import datetime as dt
import json

from tests import helpers


def millis(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def produce_at(topic: str, count: int, at: dt.datetime, start: int = 0) -> None:
    """Like ``helpers.produce`` (the same JSON order events, round-robin over the partitions), with
    every record's timestamp set to ``at``."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=helpers.bootstrap())
    partitions = sorted(producer.partitions_for(topic))
    for i in range(start, start + count):
        value = json.dumps({"order_id": i, "amount": round(i * 1.5, 2)}).encode()
        producer.send(topic, key=f"k{i}".encode(), value=value, partition=partitions[i % len(partitions)],
                      headers=[("source", b"test")], timestamp_ms=millis(at))
    producer.flush()
    producer.close()
