"""Spark reads exactly the frozen ranges from the real broker and writes the contracted columns."""

from __future__ import annotations

import datetime as dt

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.plan import BatchPlan
from tidemark.batch.spark import batch_io, shaping
from tidemark.batch.tables import output_txn_version
from tidemark.formats.record_format import RecordFormat
from tidemark.kafka.offsets import OffsetRange

pytestmark = pytest.mark.integration

def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def test_bounded_read_returns_exactly_the_requested_offsets(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("bounded"), partitions=3)
    helpers.produce(topic, 30)  # 10 records per partition, offsets 0..9
    ranges = [OffsetRange(topic, 0, 2, 7), OffsetRange(topic, 1, 0, 10), OffsetRange(topic, 2, 9, 9)]
    plan = BatchPlan("p", 1, str(lake / "t"), settings.ledger_uri(), ranges)
    raw = batch_io.read_ranges(spark, batch_io.kafka_source_options(plan, props()))
    got = sorted((r.partition, r.offset) for r in raw.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(2, 7)] + [(1, o) for o in range(0, 10)]


def test_output_has_the_contracted_columns_and_the_marker_makes_a_rewrite_a_no_op(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("columns"), partitions=2)
    helpers.produce(topic, 6)
    table = str(lake / "out")
    plan = BatchPlan("colpipe", 7, table, settings.ledger_uri(),
                     [OffsetRange(topic, 0, 0, 3), OffsetRange(topic, 1, 0, 3)])
    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    raw = batch_io.read_ranges(spark, batch_io.kafka_source_options(plan, props()))
    output = shaping.to_rows(raw, RecordFormat(), 7, at)
    batch_io.write_output(output, plan)

    df = spark.read.format("delta").load(table)
    assert df.columns == ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key",
                          "kafka_headers", "value", "ingest_batch_id", "ingested_at"]
    types = dict(df.dtypes)
    assert types["kafka_partition"] == "int" and types["kafka_offset"] == "bigint"
    assert types["kafka_timestamp"] == "timestamp" and types["kafka_key"] == "binary"
    assert types["kafka_headers"].startswith("array<struct<key:string,value:binary>>")
    rows = df.orderBy("kafka_partition", "kafka_offset").collect()
    assert len(rows) == 6
    first = rows[0]
    assert (first.kafka_topic, first.kafka_partition, first.kafka_offset) == (topic, 0, 0)
    assert first.kafka_key == b"k0" and first.value.startswith(b'{"order_id": 0')
    assert [(h.key, h.value) for h in first.kafka_headers] == [("source", b"test")]
    assert {r.ingest_batch_id for r in rows} == {7}
    assert output_txn_version(table, "colpipe") == 7

    version = helpers.table_version(table)
    batch_io.write_output(output, plan)  # the same batch again: Delta skips it by the marker
    assert helpers.table_version(table) == version
    assert spark.read.format("delta").load(table).count() == 6


def test_a_record_without_key_or_headers_has_null_in_both_columns(kafka_bootstrap, spark, lake):
    """The documented null rules (docs/CONFIGURATION.md): no key -> kafka_key null; no headers ->
    kafka_headers null (not an empty list), as Spark's Kafka source gives them."""
    topic = helpers.create_topic(helpers.unique("nulls"), partitions=1)
    helpers.produce_pairs(topic, [(None, b"v")])
    plan = BatchPlan("nulls", 1, str(lake / "t"), settings.ledger_uri(), [OffsetRange(topic, 0, 0, 1)])
    raw = batch_io.read_ranges(spark, batch_io.kafka_source_options(plan, props()))
    [row] = shaping.to_rows(raw, RecordFormat(), 1, dt.datetime.now(dt.UTC)).collect()
    assert (row.kafka_key, row.kafka_headers, row.value) == (None, None, b"v")
