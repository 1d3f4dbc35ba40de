"""JSON values with a declared schema; bad records go to the dead-letter table in the same batch."""

from __future__ import annotations

import json

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config import parse_pipeline
from tidemark.errors import BadRecordsError
from tidemark.ledger import Ledger

pytestmark = pytest.mark.integration

SCHEMA = {"order_id": "bigint", "amount": "double", "note": "string?"}
POISON = [
    (b"{not json", "value is not a JSON object"),
    (b"[1, 2, 3]", "value is not a JSON object"),
    (json.dumps({"amount": 3.5}).encode(), "missing required field 'order_id'"),
    (json.dumps({"order_id": "abc", "amount": 1.0}).encode(), "field 'order_id': not a valid bigint"),
    (json.dumps({"order_id": 1, "amount": 2.0, "pad": "x" * 600}).encode(), "exceeds max_value_bytes (500)"),
]


def json_pipeline(topic: str, **extra):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                           "value_schema": SCHEMA, "max_value_bytes": 500, **extra}, "test")


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def test_good_records_are_typed_columns_and_bad_ones_are_dead_letters(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("json"), partitions=2)
    helpers.produce(topic, 10)  # good: {"order_id", "amount"}; "note" is optional
    helpers.produce_values(topic, [v for v, _ in POISON], partition=1)
    config = json_pipeline(topic)
    plan = prepare_batch(config, props())
    execute_batch(spark, plan, props(), "read_committed")

    out = spark.read.format("delta").load(config.table_uri)
    assert out.columns == ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key",
                           "kafka_headers", "order_id", "amount", "note", "ingest_batch_id", "ingested_at"]
    assert dict(out.dtypes)["order_id"] == "bigint" and dict(out.dtypes)["amount"] == "double"
    assert sorted(r.order_id for r in out.collect()) == list(range(10))

    dead = sorted(spark.read.format("delta").load(config.dead_letter_uri).collect(), key=lambda r: r.kafka_offset)
    assert len(dead) == len(POISON)
    for row, (value, error) in zip(dead, POISON, strict=True):
        assert row.value == value and error in row.error
        assert (row.pipeline, row.kafka_topic, row.kafka_partition, row.ingest_batch_id) == (topic, topic, 1, 1)

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
        execute_batch(spark, plan, props(), "read_committed")
    assert helpers.query_or_none(config.table_uri) is None
    assert helpers.query_or_none(config.dead_letter_uri) is None
    assert Ledger(settings.ledger_uri()).state(topic).pending_batch_id == 1
