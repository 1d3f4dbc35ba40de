"""`make bench-json`: JSON values with a declared schema, read into typed columns of a Delta table by
Tidemark and by the baselines, all parsing the same schema with Spark's ``from_json`` (the harness:
bench/typed.py).

The backlog is BENCH_JSON_RECORDS (default 1,000,000) JSON order events of BENCH_RECORD_BYTES=300
bytes each (bench/data.py's, sent by Kafka's ProducerPerformance in two halves) on BENCH_PARTITIONS=8
partitions, plus one poison line per 1,000 events, sent between the two halves by kafka-python, round
robin over the partitions (so that every partition holds bad records): every other one ``{not json``,
the others an order event cut in half. The schema is 7 of the event's fields (its ``items`` array is
not declared). The baselines: AvailableNow and a plain batch read, both with ``from_json``
(PERMISSIVE). Results: bench/results/typed_json.json.
"""

from __future__ import annotations

import random
import time

from bench import data
from bench.knobs import BenchSettings
from bench.typed import POISON_EVERY, Backlog, ValueFormat, available_now, main, plain_batch
from tidemark.formats.record_format import RecordFormat
from tidemark.formats.records import parse_field_type

VALUE_SCHEMA = {"order_id": "bigint", "customer_id": "bigint", "amount": "double", "currency": "string",
                "status": "string", "created_at": "timestamp", "note": "string"}
"""The declared fields of bench/data.py's order event (its ``items`` array is left out)."""


def spark_ddl() -> str:
    """The schema as Tidemark hands it to ``from_json`` (the baselines get exactly this string)."""
    return RecordFormat("json", tuple(parse_field_type(n, t) for n, t in VALUE_SCHEMA.items())).spark_ddl()


def poison_lines(count: int, size: int) -> list[bytes]:
    """One line each (no newline inside): ``{not json``, or an order event cut in half."""
    rng = random.Random(7)
    return [b"{not json" if k % 2 == 0 else data.order_event(10**7 + k, size, rng)[:size // 2].encode()
            for k in range(count)]


def produce_poison(settings: BenchSettings, topic: str, lines: list[bytes]) -> None:
    """The poison, round robin over the partitions (kafka-python; a few thousand records at most)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks=1, linger_ms=20)
    try:
        for k, line in enumerate(lines):
            producer.send(topic, value=line, partition=k % settings.partitions)
        producer.flush()
    finally:
        producer.close()


def produce_json(settings: BenchSettings, topic: str) -> Backlog:
    """BENCH_JSON_RECORDS good events in two halves (ProducerPerformance), the poison between them."""
    good, size = settings.records, settings.record_bytes
    lines = poison_lines(good // POISON_EVERY if POISON_EVERY else 0, size)
    data.create_topic(settings, topic, settings.partitions)
    started = time.perf_counter()
    first = data.produce(settings, topic, good // 2, size)
    produce_poison(settings, topic, lines)
    second = data.produce(settings, topic, good - good // 2, size, already=good // 2 + len(lines))
    seconds = time.perf_counter() - started
    kinds = {"not_json": sum(1 for line in lines if line == b"{not json")}
    kinds["truncated_event"] = len(lines) - kinds["not_json"]
    facts = {"topic": topic, "records": good + len(lines), "good": good, "poison": len(lines), "poison_kinds": kinds,
             "record_bytes": size, "bytes": good * size + sum(len(line) for line in lines),
             "partitions": len(second["records_per_partition"]),
             "records_per_partition": second["records_per_partition"],
             "producer": "ProducerPerformance (two halves, payloads from bench/data.py) + kafka-python (the poison)",
             "produce_seconds": round(seconds, 1),
             "producer_records_per_second": round((first["producer_records_per_second"]
                                                   + second["producer_records_per_second"]) / 2)}
    return Backlog(facts, {"value_format": "json", "value_schema": VALUE_SCHEMA}, ["--schema", spark_ddl()],
                   {"value_schema": VALUE_SCHEMA, "spark_ddl": spark_ddl()})


FINGERPRINT = ("SELECT COUNT(*) AS rows, SUM(order_id) AS order_ids, SUM(customer_id) AS customer_ids, "
               "SUM(CAST(ROUND(amount * 100) AS BIGINT)) AS cents, COUNT(DISTINCT currency) AS currencies, "
               "COUNT(DISTINCT status) AS statuses, SUM(LENGTH(currency) + LENGTH(status) + LENGTH(note)) "
               "AS characters, CAST(MIN(created_at) AS VARCHAR) AS earliest, "
               "CAST(MAX(created_at) AS VARCHAR) AS latest FROM t WHERE order_id IS NOT NULL")
TIDEMARK, NOW, BATCH = "tidemark_json", "available_now_json", "plain_batch_json"
JSON = ValueFormat("json", "Tidemark ingest job (plan + spark-submit), JSON with dead letters",
                   (available_now("json", "from_json"), plain_batch(BATCH, "from_json")),
                   ((TIDEMARK, NOW), (TIDEMARK, BATCH), (NOW, BATCH)), FINGERPRINT, produce_json, "typed_json.json",
                   extra_settings=lambda settings, backlog: {"good_records": backlog.facts["good"]})

if __name__ == "__main__":
    main(JSON)
