"""``tidemark audit PIPELINE --verify-sample N``: a sample of committed ranges still retained in Kafka is read
again from Kafka and compared, record by record through an order-free checksum, with what the output and
dead-letter tables hold at those Kafka coordinates.

For a raw pipeline, each record's digest covers its offset, key bytes, timestamp and value bytes. A range's
checksum is the sum of its records' digests modulo 2**64, so Kafka's order and the tables' need not agree,
and neither side is held in memory: Kafka is read in polls, the tables in record batches (delta-rs). A range
matches when both sides have as many records and the same checksum.

A JSON or Avro output (or an Avro key's column) keeps typed columns instead of the value's bytes: its ranges
are decoded again by the ingest decoder in Spark and compared record by record, value by value
(``tidemark.audit.typed_sample``), when the caller hands ``verify_sample`` the Spark side (the CLI and the audit
DAG do); without it, only the offsets, keys and timestamps are compared here (``values_compared`` false).

Ranges are sampled among committed batch and backfill ranges with records whose start Kafka still retains
(at or after the partition's earliest offset). On a compacted topic, records compacted away since they were
ingested show as a mismatch.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Mapping

from tidemark import storage
from tidemark.audit.live_table import checked_ranges
from tidemark.audit.typed_sample import ValueCheck, batch_formats, build_check, needs_values
from tidemark.audit.typed_sample import mismatches as value_mismatches
from tidemark.config.pipeline import PipelineConfig
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.state import LedgerRow
from tidemark.ledger.store import Ledger
from tidemark.storage import ObjectStore

_MASK = (1 << 64) - 1
POLL_MS = 500


def digest(offset: int, key: bytes | None, timestamp_ms: int | None, value: bytes | None) -> int:
    """One record's 64-bit digest (``value`` None when values are not compared)."""
    h = hashlib.blake2b(digest_size=8)
    for part in (str(offset).encode(), key, str(timestamp_ms).encode(), value):
        h.update(b"\x00" if part is None else len(part).to_bytes(4, "big") + part)
    return int.from_bytes(h.digest(), "big")


def choose(ranges: list[LedgerRow], earliest: Mapping[TopicPartition, int], count: int,
           rng: random.Random | None = None) -> tuple[list[LedgerRow], int]:
    """Up to ``count`` ranges, at random, among those with records that Kafka still retains; and how many
    ranges with records were not retained any more."""
    with_records = [r for r in ranges if r.record_count]
    retained = [r for r in with_records if r.tp in earliest and r.start_offset >= earliest[r.tp]]
    picked = (rng or random.Random()).sample(retained, min(count, len(retained)))
    return sorted(picked, key=lambda r: (r.batch_id, r.topic, r.partition)), len(with_records) - len(retained)


def kafka_checksum(consumer, r: LedgerRow, with_value: bool, timeout_s: float) -> tuple[int, int]:
    """(records, checksum) of the range read from Kafka with a group-less consumer."""
    import time

    from kafka import TopicPartition as KafkaTP

    tp = KafkaTP(r.topic, r.partition)
    consumer.assign([tp])
    consumer.seek(tp, r.start_offset)
    count = total = 0
    deadline = time.monotonic() + timeout_s
    while consumer.position(tp) < r.end_offset:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{r.topic}:{r.partition} [{r.start_offset}, {r.end_offset}): Kafka returned records "
                               f"up to offset {consumer.position(tp)} only within {timeout_s:.0f} s")
        for record in consumer.poll(timeout_ms=POLL_MS).get(tp, []):
            if record.offset < r.end_offset:
                count += 1
                total = (total + digest(record.offset, record.key, record.timestamp,
                                        record.value if with_value else None)) & _MASK
    return count, total


def _table_batches(uri: str, store: ObjectStore | None, sql: str) -> Iterable:
    import pyarrow as pa
    from deltalake import QueryBuilder

    table = storage.open_table(uri, store)
    if table is None:
        return
    for batch in QueryBuilder().register("t", table).execute(sql):
        yield pa.record_batch(batch)


def table_checksum(r: LedgerRow, tables: list[tuple[str, bool, str]], store: ObjectStore | None) -> tuple[int, int]:
    """(records, checksum) of what the tables hold at the range's coordinates. ``tables``: (uri, whether its
    value is compared, an extra filter)."""
    import pyarrow as pa

    where = (f"kafka_topic = '{r.topic.replace(chr(39), chr(39) * 2)}' AND kafka_partition = {int(r.partition)} "
             f"AND kafka_offset >= {int(r.start_offset)} AND kafka_offset < {int(r.end_offset)}")
    count = total = 0
    for uri, with_value, extra in tables:
        columns = "kafka_offset, kafka_key, CAST(kafka_timestamp AS BIGINT) AS ts" + (", value" if with_value else "")
        for batch in _table_batches(uri, store, f"SELECT {columns} FROM t WHERE {where}{extra}"):
            stamps = batch.column("ts").cast(pa.int64()).to_pylist()
            values = batch.column("value").to_pylist() if with_value else [None] * batch.num_rows
            for offset, key, ts, value in zip(batch.column("kafka_offset").to_pylist(),
                                              batch.column("kafka_key").to_pylist(), stamps, values, strict=True):
                count += 1
                total = (total + digest(offset, key, None if ts is None else _to_ms(ts), value)) & _MASK
    return count, total


def _to_ms(stamp: int) -> int:
    """delta-rs casts a microsecond timestamp to its number of microseconds."""
    return stamp // 1000


def verify_sample(config: PipelineConfig, kafka_properties: Mapping[str, str], ledger_uri: str,
                  store: ObjectStore | None, count: int, rng: random.Random | None = None,
                  values: Callable[[ValueCheck], list[dict]] | None = None) -> dict:
    """Read ``count`` retained committed ranges again from Kafka and compare them with the tables: the
    ``sample`` part of the audit's report. A typed pipeline's ranges (JSON or Avro values, Avro keys) are
    decoded and compared value by value by ``values`` (Spark: ``tidemark_spark.audit_decode``; see
    ``tidemark.audit.typed_sample``); without it, only their offsets, keys and timestamps are compared here."""
    from tidemark.batch.prepare import kafka_offsets

    rows = Ledger(ledger_uri, store).rows(config.name)
    ranges = checked_ranges(rows)
    typed = values is not None and needs_values(config)
    formats: dict = {}
    refused: dict[int, str] = {}
    if typed:
        formats, refused = batch_formats(config, [r for r in ranges if r.record_count], store)
        ranges = [r for r in ranges if r.batch_id not in refused]
    raw_values = config.value_format == "raw"
    quoted = config.name.replace("'", "''")
    tables = [(config.table_uri, raw_values, ""), (config.dead_letter_uri, raw_values, f" AND pipeline = '{quoted}'")]
    mismatches, verified = [], 0
    with kafka_offsets(config, kafka_properties) as kafka:
        earliest = kafka.earliest(sorted({r.tp for r in ranges}))
        picked, gone = choose(ranges, earliest, count, rng)
        for r in [] if typed else picked:
            read = kafka_checksum(kafka._consumer, r, raw_values, config.kafka_timeout_seconds)
            held = table_checksum(r, tables, store)
            verified += 1
            if read != held:
                mismatches.append({"topic": r.topic, "partition": r.partition, "start": r.start_offset,
                                   "end": r.end_offset, "batch_id": r.batch_id, "kafka_records": read[0],
                                   "table_records": held[0], "checksums_differ": read[1] != held[1]})
    if typed and picked:
        check = build_check(config, picked, rows, formats)
        mismatches, verified = value_mismatches(check, values(check)), len(picked)
    not_comparable = [{"batch_id": b, "reason": why} for b, why in sorted(refused.items())]
    return {"requested": count, "verified": verified, "not_retained": gone, "values_compared": raw_values or typed,
            "mismatches": mismatches, **({"not_comparable": not_comparable} if not_comparable else {})}
