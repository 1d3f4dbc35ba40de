"""Two times operators ask about, read from Kafka and Delta (no Airflow):

- since when an open transaction has held a partition back: the Kafka timestamp of the first record it
  holds, the record at the last stable offset (the first offset of the oldest open transaction), read
  under ``read_uncommitted``. No state is kept: Kafka itself says when the hold began (with the
  producer's clock, or the broker's under ``message.timestamp.type=LogAppendTime``);
- how fresh the output is: the newest ``kafka_timestamp`` in the output table, from the statistics of
  its Delta log (the per-file maximum Spark records for each of the first 32 columns), so nothing but
  the log is read. A table whose files carry no statistics for that column has no known freshness."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping

from tidemark import storage
from tidemark.kafka.client import client_kwargs, quiet_kafka_logging
from tidemark.kafka.offsets import TopicPartition
from tidemark.storage import ObjectStore

log = logging.getLogger("tidemark")

TIMESTAMP_STAT = "max.kafka_timestamp"


def hold_started(kafka_properties: Mapping[str, str], held: Mapping[TopicPartition, int], *,
                 timeout_seconds: float = 10, pipeline: str | None = None) -> dict[TopicPartition, dt.datetime]:
    """For each held partition (its last stable offset), when its hold began: the timestamp of the record
    at that offset. Partitions whose record cannot be read in time are left out (best effort: this only
    dates a warning). One group-less consumer, only when something is held."""
    if not held:
        return {}
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.errors import KafkaError

    quiet_kafka_logging()
    wanted = {KTP(tp.topic, tp.partition): offset for tp, offset in held.items()}
    found: dict[TopicPartition, dt.datetime] = {}
    try:
        consumer = KafkaConsumer(isolation_level="read_uncommitted", enable_auto_commit=False,
                                 request_timeout_ms=int(timeout_seconds * 1000), **client_kwargs(kafka_properties))
    except KafkaError as exc:
        log.warning("pipeline '%s': could not date the open transactions' holds (%s)", pipeline, exc)
        return {}
    try:
        consumer.assign(list(wanted))
        for ktp, offset in wanted.items():
            consumer.seek(ktp, offset)
        deadline = time.monotonic() + timeout_seconds
        while len(found) < len(wanted) and time.monotonic() < deadline:
            for ktp, records in consumer.poll(timeout_ms=500).items():
                first = next((r for r in records if r.offset >= wanted[ktp]), None)
                if first is not None:
                    found[TopicPartition(ktp.topic, ktp.partition)] = dt.datetime.fromtimestamp(
                        first.timestamp / 1000, dt.UTC)
                    consumer.pause(ktp)
    except KafkaError as exc:
        log.warning("pipeline '%s': could not date the open transactions' holds (%s)", pipeline, exc)
    finally:
        consumer.close()
    return found


def newest_record_time(table_uri: str, store: ObjectStore | None = None) -> dt.datetime | None:
    """The newest ``kafka_timestamp`` in the output table, from its Delta log's file statistics; None
    when there is no table, no file, or no statistics of that column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = storage.open_table(table_uri, store)
    if table is None:
        return None
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0 or TIMESTAMP_STAT not in actions.column_names:
        return None
    newest = pc.max(actions.column(TIMESTAMP_STAT)).as_py()
    if newest is None:
        return None
    return newest if newest.tzinfo else newest.replace(tzinfo=dt.UTC)


def freshness_seconds(table_uri: str, store: ObjectStore | None = None,
                      now: dt.datetime | None = None) -> float | None:
    """Seconds since the newest record in the output table (``newest_record_time``); None if unknown."""
    newest = newest_record_time(table_uri, store)
    if newest is None:
        return None
    return max(((now or dt.datetime.now(dt.UTC)) - newest).total_seconds(), 0.0)
