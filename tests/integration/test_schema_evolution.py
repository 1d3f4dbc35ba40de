"""A JSON pipeline whose ``value_schema`` changes between batches, against the real broker, Spark
and Delta: a new field adds a column; a removed or retyped field is refused at plan time under
``schema_changes: additive`` (nothing frozen), and under ``lenient`` a removed field's column stays
(null in new rows) and a retyped field is cast to the column's type, a value that does not fit
being a dead letter."""

from __future__ import annotations

import json

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import SchemaChangeError
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

ORDERS = {"order_id": "bigint", "amount": "double"}  # what helpers.produce sends


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def json_pipeline(topic: str, schema: dict[str, str], **extra):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                           "value_schema": schema, **extra}, "test")


def send(topic: str, *records: dict) -> None:
    helpers.produce_values(topic, [json.dumps(r).encode() for r in records])


def run_batch(spark, config) -> None:
    execute_batch(spark, prepare_batch(config, props()), props())


def rows(spark, uri: str) -> list:
    return sorted(spark.read.format("delta").load(uri).collect(), key=lambda r: (r.kafka_partition, r.kafka_offset))


def committed(topic: str, batch_id: int) -> tuple[int, int]:
    """(records, dead letters) the ledger committed for a batch."""
    entries = [r for r in Ledger(settings.ledger_uri()).rows(topic) if r.batch_id == batch_id]
    return sum(r.record_count for r in entries), sum(r.dead_letter_count for r in entries)


def assert_refused_and_nothing_frozen(config, message: str) -> None:
    ledger = Ledger(settings.ledger_uri())
    before = ledger.version()
    with pytest.raises(SchemaChangeError, match=message) as err:
        prepare_batch(config, props())
    assert "schema_changes: lenient" in str(err.value) and "Nothing was frozen" in str(err.value)
    assert ledger.version() == before, "a refused schema change must not freeze anything"
    state = ledger.state(config.name)
    assert state.pending_batch_id is None and state.last_batch_id == 1


def test_a_new_optional_field_adds_a_column(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("evolve-add"), partitions=1)
    helpers.produce(topic, 3)
    run_batch(spark, json_pipeline(topic, ORDERS))

    send(topic, {"order_id": 10, "amount": 1.0, "region": "eu"}, {"order_id": 11, "amount": 2.0})
    config = json_pipeline(topic, {**ORDERS, "region": "string?"})
    plan = prepare_batch(config, props())
    assert plan.format.add_columns and plan.format.casts == {}
    execute_batch(spark, plan, props())

    out = spark.read.format("delta").load(config.table_uri)
    assert "region" in out.columns and dict(out.dtypes)["region"] == "string"
    assert [(r.ingest_batch_id, r.order_id, r.region) for r in rows(spark, config.table_uri)] == [
        (1, 0, None), (1, 1, None), (1, 2, None), (2, 10, "eu"), (2, 11, None)]
    # delta-rs (the ledger's and the page's reader) still reads the evolved table.
    assert helpers.query(config.table_uri, "SELECT COUNT(*) AS n, COUNT(region) AS r FROM t") == [{"n": 5, "r": 1}]
    assert committed(topic, 2) == (2, 0)
    assert helpers.query_or_none(config.dead_letter_uri) is None

    # The same schema again adds nothing (the plan alone says so).
    send(topic, {"order_id": 12, "amount": 3.0, "region": "us"})
    assert not prepare_batch(config, props()).format.add_columns


def test_a_removed_field_is_refused_by_default(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("evolve-removed"), partitions=1)
    send(topic, {"order_id": 1, "amount": 1.0, "note": "first"})
    run_batch(spark, json_pipeline(topic, {**ORDERS, "note": "string?"}))

    send(topic, {"order_id": 2, "amount": 2.0})
    assert_refused_and_nothing_frozen(json_pipeline(topic, ORDERS),
                                      r"field 'note' is no longer in the schema \(the table's column 'note' would be "
                                      r"null from now on\)")


def test_a_retyped_field_is_refused_by_default(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("evolve-retyped"), partitions=1)
    helpers.produce(topic, 2)
    run_batch(spark, json_pipeline(topic, ORDERS))

    send(topic, {"order_id": 5, "amount": "5.00 EUR"})
    assert_refused_and_nothing_frozen(json_pipeline(topic, {"order_id": "bigint", "amount": "string"}),
                                      r"field 'amount' is string in the schema but double in the table")


def test_lenient_keeps_a_removed_fields_column_null_in_new_rows(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("lenient-removed"), partitions=1)
    send(topic, {"order_id": 1, "amount": 1.0, "note": "first"})
    run_batch(spark, json_pipeline(topic, {**ORDERS, "note": "string?"}))

    send(topic, {"order_id": 2, "amount": 2.0}, {"order_id": 3, "amount": 3.0, "note": "no longer read"})
    config = json_pipeline(topic, ORDERS, schema_changes="lenient")
    plan = prepare_batch(config, props())
    assert not plan.format.add_columns and plan.format.casts == {}
    execute_batch(spark, plan, props())

    assert "note" in spark.read.format("delta").load(config.table_uri).columns
    assert [(r.ingest_batch_id, r.order_id, r.note) for r in rows(spark, config.table_uri)] == [
        (1, 1, "first"), (2, 2, None), (2, 3, None)]
    assert helpers.query(config.table_uri, "SELECT COUNT(*) AS n, COUNT(note) AS notes FROM t") == [
        {"n": 3, "notes": 1}]
    assert committed(topic, 2) == (2, 0)


def test_lenient_casts_a_retyped_field_and_dead_letters_what_does_not_fit(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("lenient-retyped"), partitions=1)
    send(topic, {"order_id": 1, "qty": 5})
    run_batch(spark, json_pipeline(topic, {"order_id": "bigint", "qty": "bigint"}))

    send(topic, {"order_id": 2, "qty": "12"}, {"order_id": 3, "qty": "twelve"}, {"order_id": 4, "qty": 7})
    config = json_pipeline(topic, {"order_id": "bigint", "qty": "string"}, schema_changes="lenient")
    plan = prepare_batch(config, props())
    assert plan.format.casts == {"qty": "long"} and not plan.format.add_columns
    execute_batch(spark, plan, props())

    out = spark.read.format("delta").load(config.table_uri)
    assert dict(out.dtypes)["qty"] == "bigint"
    assert [(r.ingest_batch_id, r.order_id, r.qty) for r in rows(spark, config.table_uri)] == [
        (1, 1, 5), (2, 2, 12), (2, 4, 7)]
    dead = rows(spark, config.dead_letter_uri)
    assert len(dead) == 1 and json.loads(dead[0].value) == {"order_id": 3, "qty": "twelve"}
    assert "field 'qty': 'twelve' is not a valid bigint" in dead[0].error, dead[0].error
    assert (dead[0].kafka_offset, dead[0].ingest_batch_id) == (2, 2)
    assert committed(topic, 2) == (3, 1)
