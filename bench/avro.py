"""`make bench-avro`: Avro values in the Confluent wire format, read into typed columns of a Delta
table by Tidemark and by the baselines, all decoding the same schema from the same Schema Registry (the
harness: bench/typed.py).

The backlog (BENCH_AVRO_RECORDS, default 1,000,000 order records of about BENCH_RECORD_BYTES=300
bytes each on BENCH_PARTITIONS=8 partitions) is one schema version (7 fields: long, string, double,
enum, nullable string, timestamp-millis, a padding string) registered under `<topic>-value` in the
registry at SCHEMA_REGISTRY_URL (scripts/bench_avro.sh starts one); a few thousand distinct values
are encoded with fastavro and sent by kafka-python (its time is recorded, not compared). One record
in 1,000 is poison (every other one a wrong magic byte, the others a truncated body). Tidemark's plan
call reads and freezes the schemas, its job decodes with ``from_avro``; the baselines: AvailableNow
with ``from_avro``, and the decoder comparison, one plain Spark batch read each decoding with Spark's
``from_avro`` or with fastavro's ``schemaless_reader`` in ``mapInArrow``. Results: bench/results/avro.json.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import time

from bench import data
from bench.knobs import BenchSettings
from bench.typed import POISON_EVERY, Backlog, ValueFormat, available_now, main, plain_batch
from devkit import localstack

ORDER_SCHEMA = {"type": "record", "name": "Order", "namespace": "bench.avro", "fields": [
    {"name": "order_id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED", "CANCELLED"]}},
    {"name": "coupon", "type": ["null", "string"], "default": None},
    {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "note", "type": "string"},
]}
DISTINCT_VALUES = 4096


def order_record(i: int, rng: random.Random) -> dict:
    return {"order_id": 10**9 + i, "customer": f"customer-{rng.randrange(10**6):06d}",
            "amount": rng.randrange(100, 50000) / 100, "status": rng.choice(["NEW", "PAID", "SHIPPED", "CANCELLED"]),
            "coupon": rng.choice([None, None, f"SAVE{rng.randrange(5, 50)}"]),
            "created_at": dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=37 * i), "note": ""}


def wire_value(schema_id: int, parsed: dict, record: dict, size: int) -> bytes:
    """``record`` in the Confluent wire format, its ``note`` padded so the value is ``size`` bytes."""
    from fastavro import schemaless_writer

    def encode(rec: dict) -> bytes:
        body = io.BytesIO()
        schemaless_writer(body, parsed, rec)
        return b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()

    value = encode(record)
    if len(value) > size:
        raise ValueError(f"BENCH_RECORD_BYTES={size} is too small for an Avro order record ({len(value)} bytes)")
    note = "x" * (size - len(value))
    while len(value := encode({**record, "note": note})) != size:  # the length prefix of the string grew
        note = note[:len(note) - (len(value) - size)]
    return value


def poison(i: int, good: bytes) -> bytes | None:
    """Record i is poison when i % 1000 == 999: a wrong magic byte when i % 2000 == 999, else a truncated body."""
    if not POISON_EVERY or i % POISON_EVERY != POISON_EVERY - 1:
        return None
    if i % (2 * POISON_EVERY) == POISON_EVERY - 1:
        return b"\x01" + good[1:]  # not the Confluent wire format
    return good[:5 + 12]  # the header, then a body cut short


def send_values(settings: BenchSettings, topic: str, schema_id: int) -> dict:
    """BENCH_AVRO_RECORDS values, spread evenly over the partitions, sent by kafka-python."""
    from fastavro import parse_schema
    from kafka import KafkaProducer

    parsed = parse_schema(ORDER_SCHEMA)
    rng = random.Random(42)
    values = [wire_value(schema_id, parsed, order_record(i, rng), settings.record_bytes)
              for i in range(DISTINCT_VALUES)]
    data.create_topic(settings, topic, settings.partitions)
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks=1, linger_ms=50, batch_size=512 * 1024,
                             max_request_size=2 * 1024 * 1024, compression_type=None)
    kinds = {"magic_byte": 0, "truncated_body": 0}
    started = time.perf_counter()
    try:
        for i in range(settings.records):
            good = values[i % DISTINCT_VALUES]
            bad = poison(i, good)
            if bad is not None:
                kinds["magic_byte" if bad[0] != 0 else "truncated_body"] += 1
            producer.send(topic, value=bad if bad is not None else good, partition=i % settings.partitions)
        producer.flush()
    finally:
        producer.close()
    seconds = time.perf_counter() - started
    offsets = data.end_offsets(settings, topic)
    if sum(offsets.values()) != settings.records:
        raise RuntimeError(f"topic {topic} holds {sum(offsets.values())} records, expected {settings.records}")
    return {"topic": topic, "records": settings.records, "record_bytes": settings.record_bytes,
            "partitions": len(offsets), "records_per_partition": offsets, "distinct_values": DISTINCT_VALUES,
            "poison": sum(kinds.values()), "poison_kinds": kinds, "schema_id": schema_id,
            "subject": f"{topic}-value",
            "producer": "kafka-python KafkaProducer (acks=1, linger 50 ms, 512 KiB batches)",
            "produce_seconds": round(seconds, 1), "producer_records_per_second": round(settings.records / seconds)}


def require_registry(url: str) -> None:
    import requests

    try:
        requests.get(f"{url}/subjects", timeout=10).raise_for_status()
    except requests.RequestException as exc:
        raise SystemExit(f"the Schema Registry at {url} does not answer ({type(exc).__name__}); "
                         "`make bench-avro` starts one (scripts/bench_avro.sh)") from None


def produce_avro(settings: BenchSettings, topic: str) -> Backlog:
    """The schema registered under ``<topic>-value``, the writer schemas for the baselines in a file, the values."""
    registry = localstack.schema_registry_url()
    require_registry(registry)
    schema_id = localstack.register_schema(f"{topic}-value", ORDER_SCHEMA, registry)
    writers = settings.work / "writers.json"
    writers.write_text(json.dumps({str(schema_id): json.dumps(ORDER_SCHEMA)}))
    return Backlog(send_values(settings, topic, schema_id), {"value_format": "avro"},
                   ["--schemas-file", str(writers)], {"schema": ORDER_SCHEMA}, registry_url=registry)


FINGERPRINT = ("SELECT COUNT(*) AS rows, SUM(order_id) AS order_ids, SUM(CAST(ROUND(amount * 100) AS BIGINT)) AS "
               "cents, COUNT(coupon) AS coupons, COUNT(DISTINCT status) AS statuses, SUM(LENGTH(customer) + "
               "LENGTH(note)) AS characters, CAST(MAX(created_at) AS VARCHAR) AS latest "
               "FROM t WHERE order_id IS NOT NULL")
TIDEMARK, NOW, FROM_AVRO, FASTAVRO = "tidemark_avro", "available_now_avro", "from_avro_batch", "fastavro_batch"
AVRO = ValueFormat("avro", "Tidemark ingest job (plan with the registry + spark-submit), from_avro",
                   (available_now("avro", "from_avro"), plain_batch(FROM_AVRO, "from_avro"),
                    plain_batch(FASTAVRO, "fastavro", "fastavro in mapInArrow")),
                   ((TIDEMARK, NOW), (FASTAVRO, FROM_AVRO), (TIDEMARK, FROM_AVRO)), FINGERPRINT, produce_avro,
                   "avro.json")

if __name__ == "__main__":
    main(AVRO)
