"""JSON values with a declared schema; bad records go to the dead-letter table in the same batch."""

from __future__ import annotations

import json

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import BadRecordsError
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

SCHEMA = {"order_id": "bigint", "amount": "double", "note": "string?"}
POISON = [
    (b"{not json", "value is not a JSON object"),
    (b"[1, 2, 3]", "value is not a JSON object"),
    (json.dumps({"amount": 3.5}).encode(), "missing required field 'order_id'"),
    (json.dumps({"order_id": "abc", "amount": 1.0}).encode(), "field 'order_id': 'abc' is not a valid bigint"),
    (json.dumps({"order_id": 1, "amount": 2.0, "pad": "x" * 600}).encode(), "exceeds max_value_bytes (500)"),
]


def json_pipeline(topic: str, **extra):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                           "value_schema": SCHEMA, "max_value_bytes": 500, **extra}, "test")


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def test_good_records_are_typed_columns_and_bad_ones_are_dead_letters(kafka_bootstrap, spark, lake, caplog):
    """A few small bad records: the one pass that writes the output carries them, and the dead letters are written
    from them (delta-rs), with every column as the read-again path writes it."""
    topic = helpers.create_topic(helpers.unique("json"), partitions=2)
    helpers.produce(topic, 10)  # good: {"order_id", "amount"}; "note" is optional
    helpers.produce_values(topic, [v for v, _ in POISON], partition=1, headers=[("source", b"test")])
    config = json_pipeline(topic)
    plan = prepare_batch(config, props())
    with caplog.at_level("INFO", logger="tidemark"):
        execute_batch(spark, plan, props())
    assert f"{len(POISON)} dead letters written to {config.dead_letter_uri} (carried by the pass" in caplog.text

    out = spark.read.format("delta").load(config.table_uri)
    assert out.columns == ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key",
                           "kafka_headers", "order_id", "amount", "note", "ingest_batch_id", "ingested_at"]
    assert dict(out.dtypes)["order_id"] == "bigint" and dict(out.dtypes)["amount"] == "double"
    assert sorted(r.order_id for r in out.collect()) == list(range(10))

    dead = sorted(spark.read.format("delta").load(config.dead_letter_uri).collect(), key=lambda r: r.kafka_offset)
    assert len(dead) == len(POISON)
    written = out.collect()
    for row, (value, error) in zip(dead, POISON, strict=True):
        assert row.value == value and error in row.error
        assert (row.pipeline, row.kafka_topic, row.kafka_partition, row.ingest_batch_id) == (topic, topic, 1, 1)
        assert row.kafka_headers == [("source", b"test")] and row.kafka_key == f"v{row.kafka_offset - 5}".encode()
        assert row.ingested_at == written[0].ingested_at  # the batch's one time, to the microsecond
        assert abs((row.kafka_timestamp - written[0].kafka_timestamp).total_seconds()) < 600  # Kafka's, not 1970's
    assert [f.name for f in spark.read.format("delta").load(config.dead_letter_uri).schema] == [
        "pipeline", "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "kafka_headers",
        "value", "error", "ingest_batch_id", "ingested_at"]

    rows = {r.partition: r for r in Ledger(settings.ledger_uri()).rows(topic)}
    assert (rows[0].record_count, rows[0].dead_letter_count) == (5, 0)
    assert (rows[1].record_count, rows[1].dead_letter_count) == (5 + len(POISON), len(POISON))


def test_on_bad_record_fail_writes_nothing_and_names_the_first_bad_record(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("strict"), partitions=1)
    helpers.produce(topic, 3)
    helpers.produce_values(topic, [b"{not json"])
    config = json_pipeline(topic, on_bad_record="fail")
    plan = prepare_batch(config, props())
    with pytest.raises(BadRecordsError, match=rf"1 bad record.*{topic}:0@3: value is not a JSON object"):
        execute_batch(spark, plan, props())
    assert helpers.query_or_none(config.table_uri) is None
    assert helpers.query_or_none(config.dead_letter_uri) is None
    assert Ledger(settings.ledger_uri()).state(topic).pending_batch_id == 1


ODD_VALUES = ['{"order_id": 1, "amount": 2.5}', '{not json', '[1,2,3]', '[{"order_id": 1, "amount": 2.5}]', '5', '"s"',
              'null', '', '{"amount": 3.5}', '{"order_id": "abc", "amount": 1.0}', '{"order_id": "12", "amount": 1.0}',
              '{"order_id": 1, "amount": "2.5"}', '{"order_id": 1.5, "amount": 1}', '{"order_id": null, "amount": 1}',
              '{"order_id": 1, "amount": 1, "note": 5}', '{"order_id": 1, "amount": 1, "note": {"a": 1}}',
              '{"order_id": 1, "amount": 1, "at": "nope"}',
              '{"order_id": 1, "amount": 1, "at": "2024-01-01T00:00:00Z"}',
              '{"order_id": 1, "amount": 1, "price": "x"}', '{"order_id": 1, "amount": 1, "price": 12.345}',
              '{"order_id": 1, "amount": 1, "ok": "yes"}', '{"order_id": 1, "amount": 1, "ok": 1}',
              '  {"order_id": 1, "amount": 1}  ', '{"order_id": 1, "amount": 1} trailing',
              '{"order_id": 99999999999999999999, "amount": 1}', '{"order_id": 1, "amount": 1, "extra": [1,2]}',
              '{"ORDER_ID": 1, "amount": 1}', '{"order_id": 1, "amount": 1, "order_id": 2}',
              '{"order_id": true, "amount": 1}', '{"order_id": 1, "amount": NaN}', '{"order_id": 1, "amount": 1e400}',
              '{"order_id": [1], "amount": 1}', '{"order_id": 1, "amount": 1,}', None]


def test_the_one_parse_flags_exactly_the_values_the_full_checks_reject(spark):
    """Values are parsed once; only those that look bad go through the per-field checks that say why.
    The outcome must be the per-field checks' own, on every kind of odd value."""
    import datetime as dt

    from pyspark.sql import functions as F

    from tidemark.batch.spark import shaping
    from tidemark.batch.spark.exact_values import json_read_type
    from tidemark.formats.record_format import RecordFormat
    from tidemark.formats.records import parse_field_type

    schema = {"order_id": "bigint", "amount": "double", "note": "string?", "at": "timestamp?",
              "price": "decimal(10,2)?", "ok": "boolean?"}
    fmt = RecordFormat("json", tuple(parse_field_type(n, t) for n, t in schema.items()))
    raw = spark.createDataFrame([(None if v is None else v.encode(),) for v in ODD_VALUES], "value binary")
    kafka = raw.select(F.lit("t").alias("topic"), F.lit(0).alias("partition"),
                       F.monotonically_increasing_id().alias("offset"), F.current_timestamp().alias("timestamp"),
                       F.lit(None).cast("binary").alias("key"),
                       F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"), "value")
    got = {r.kafka_offset: r.error for r in shaping.to_rows(kafka, fmt, 1, dt.datetime.now(dt.UTC)).collect()}
    text = F.col("value").cast("string")
    read = ", ".join(f"`{f.name}` {json_read_type(f.type)}" for f in fmt.fields)  # as to_rows parses them
    full = kafka.withColumn("_parsed", F.from_json(text, read, {"mode": "PERMISSIVE"}))
    fields = shaping._json_fields(F.col("_parsed"), fmt)
    message = F.concat_ws("; ", *shaping._json_errors(text, F.col("_parsed"), fmt, fields))
    expected = {r.offset: r.e for r in full.select("offset", F.when(message != "", message).alias("e")).collect()}
    assert got == expected
    # The table above: 8 good values, 26 bad. Two were written changed before issue 38: "price": 12.345 (rounded to
    # 12.35) and "amount": 1e400 (infinity).
    assert sum(e is not None for e in got.values()) == 26
    assert "field 'price': value 12.345 has more decimal places than decimal(10,2) holds" in got.values()


def test_a_burst_of_bad_records_is_read_again_alone_for_the_dead_letters(kafka_bootstrap, spark, lake, caplog,
                                                                         monkeypatch):
    from tidemark.batch.spark import tally

    monkeypatch.setattr(tally, "BAD_PAGE_BITS", 2)  # pages of 4 offsets: [20, 24) holds the burst
    monkeypatch.setattr(tally, "CARRIED_RECORDS", 2)  # more bad records than the pass carries
    topic = helpers.create_topic(helpers.unique("burst"), partitions=2)
    good = [json.dumps({"order_id": i, "amount": 1.0}).encode() for i in range(40)]
    helpers.produce_values(topic, good[:20] + [v for v, _ in POISON[:3]] + good[20:], partition=0)
    helpers.produce_values(topic, good[:5], partition=1)
    config = json_pipeline(topic)
    plan = prepare_batch(config, props())
    with caplog.at_level("INFO", logger="tidemark"):
        execute_batch(spark, plan, props())

    assert f"read again: {topic}:0 [20, 24);" in caplog.text  # the burst's page, not the partition or the batch
    dead = spark.read.format("delta").load(config.dead_letter_uri).orderBy("kafka_offset").collect()
    assert [(r.kafka_partition, r.kafka_offset, r.value) for r in dead] == [
        (0, 20 + i, v) for i, (v, _) in enumerate(POISON[:3])]
    assert spark.read.format("delta").load(config.table_uri).count() == 45
    rows = {r.partition: r for r in Ledger(settings.ledger_uri()).rows(topic)}
    assert (rows[0].record_count, rows[0].dead_letter_count) == (43, 3)
    assert (rows[1].record_count, rows[1].dead_letter_count) == (5, 0)

    # The next batch's one bad record is carried: delta-rs appends it to the table Spark made, after Spark's commit
    monkeypatch.setattr(tally, "CARRIED_RECORDS", 2000)
    helpers.produce_values(topic, [good[0], POISON[3][0]], partition=1)
    caplog.clear()
    with caplog.at_level("INFO", logger="tidemark"):
        execute_batch(spark, prepare_batch(config, props()), props())
    assert "carried by the pass: Kafka not read again" in caplog.text and "read again:" not in caplog.text
    dead = spark.read.format("delta").load(config.dead_letter_uri).orderBy("kafka_partition", "kafka_offset").collect()
    assert [(r.kafka_partition, r.kafka_offset, r.ingest_batch_id) for r in dead] == [
        (0, 20, 1), (0, 21, 1), (0, 22, 1), (1, 6, 2)]


@pytest.mark.parametrize("buckets", [65536, 2])
def test_the_read_for_the_dead_letters_decodes_only_the_records_that_share_a_bad_records_bucket(
        kafka_bootstrap, spark, lake, caplog, monkeypatch, buckets):
    """Bad records spread over the batch: the span is the whole partition (its one page), but only the records whose
    coordinates hash into a bad record's bucket are decoded again. With two buckets, one bad bucket is more than a
    quarter of them, so every record is decoded (with four, five bad records fall into one bucket once in 256
    topic names). Either way the dead letters are exactly the bad ones."""
    from tidemark.batch.spark import tally

    monkeypatch.setattr(tally, "BAD_BUCKETS", buckets)
    monkeypatch.setattr(tally, "CARRIED_BYTES", 0)  # no bad record is small enough to carry
    topic = helpers.create_topic(helpers.unique("spread"), partitions=1)
    values = [json.dumps({"order_id": i, "amount": 1.0}).encode() for i in range(60)]
    for k, (value, _) in enumerate(POISON):
        values[k * 12 + 1] = value
    helpers.produce_values(topic, values, partition=0)
    config = json_pipeline(topic)
    plan = prepare_batch(config, props())
    with caplog.at_level("INFO", logger="tidemark"):
        execute_batch(spark, plan, props())

    bad_offsets = [k * 12 + 1 for k in range(len(POISON))]
    assert f"read again: {topic}:0 [0, 60);" in caplog.text
    dead_letters = spark.read.format("delta").load(config.dead_letter_uri)
    # the bad records' buckets, as Spark hashed them (two of them may share one)
    bad_buckets = dead_letters.select(tally.bad_bucket()).distinct().count()
    assert (f"decoded again: the records of {bad_buckets} of 65536 buckets" if buckets == 65536
            else "decoded again: every record") in caplog.text
    dead = dead_letters.orderBy("kafka_offset").collect()
    assert [(r.kafka_offset, r.value) for r in dead] == [(o, v) for o, (v, _) in zip(bad_offsets, POISON, strict=True)]
    assert spark.read.format("delta").load(config.table_uri).count() == 60 - len(POISON)


@pytest.mark.parametrize("who", ["the planner's recovery", "the job"])
def test_a_batch_in_the_output_with_a_record_for_every_offset_is_finalized_without_reading_kafka_again(
        kafka_bootstrap, spark, lake, who):
    """A run killed after the output commit of a batch that can have bad records: the next attempt must
    make sure its dead letters were written, which means reading the batch again, unless the output
    already holds a good record for every offset of its ranges (then none can be bad). The planner's
    recovery then rolls the batch forward without a Spark job, and a job handed the batch finalizes it
    without reading Kafka: shown with a Kafka that does not answer. No dead-letter table appears."""
    from tidemark.batch.modes.base import read_rows
    from tidemark.batch.recovery import recover
    from tidemark.batch.spark import tally

    topic = helpers.create_topic(helpers.unique("nobad"), partitions=2)
    helpers.produce(topic, 12)
    config = json_pipeline(topic)
    plan = prepare_batch(config, props())
    assert tally.write_output_tallying(read_rows(spark, plan, props()), plan).bad_records == 0
    # the kill: the output holds the batch, its dead letters (none) were never confirmed, the ledger still says planned
    ledger = Ledger(settings.ledger_uri())
    assert ledger.state(topic).pending_batch_id == plan.batch_id

    if who == "the job":
        execute_batch(spark, plan, {"bootstrap.servers": "127.0.0.1:1"})
    else:
        assert recover(config, ledger, ledger.state(topic), plan.owner) is None  # rolled forward: nothing to execute
    assert ledger.state(topic).pending_batch_id is None
    assert {(r.status, r.record_count, r.dead_letter_count) for r in ledger.rows(topic)} == {("committed", 6, 0)}
    assert helpers.query_or_none(config.dead_letter_uri) is None
