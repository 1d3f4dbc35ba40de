"""Avro values in the Confluent wire format, decoded with schemas from a real Schema Registry
(Apicurio, scripts/registry.sh) that the plan freezes in the ledger; bad records of every kind go
to the dead-letter table; the output table's schema evolves by the ``schema_changes`` policy."""

from __future__ import annotations

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import BadRecordsError, SchemaChangeError, SchemaRegistryUnavailableError
from tidemark.formats.schema_registry import RegistryClient
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "order_id", "type": "long"}, {"name": "amount", "type": "double"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "region", "type": ["null", "string"], "default": None}]}
V3_RETYPED = {**V1, "fields": [{"name": "order_id", "type": "long"}, {"name": "amount", "type": "string"}]}


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def avro_pipeline(topic: str, **extra):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "avro", **extra}, "test")


def out_rows(spark, uri: str) -> list:
    return sorted(spark.read.format("delta").load(uri).collect(), key=lambda r: (r.kafka_partition, r.kafka_offset))


def test_two_schema_versions_every_bad_record_and_an_added_column(kafka_bootstrap, schema_registry, spark, lake):
    topic = helpers.create_topic(helpers.unique("avro"), partitions=2)
    subject = f"{topic}-value"
    registry = RegistryClient(schema_registry)
    v1 = helpers.register_schema(subject, V1)
    helpers.produce_values(topic, [helpers.avro_value(v1, V1, {"order_id": i, "amount": i / 2}) for i in range(4)])
    bad = [
        (b"\x01" + v1.to_bytes(4, "big") + b"\x02", "magic byte is 1, not 0"),
        (b"\x00\x00", "value of 2 bytes is shorter than the 5-byte Confluent header"),
        (helpers.avro_value(987654, V1, {"order_id": 9, "amount": 1.0}),
         f"schema id 987654 is not a version of subject '{subject}'"),
        (b"\x00" + v1.to_bytes(4, "big") + b"\x81", f"the Avro body does not decode with schema id {v1}"),
    ]
    helpers.produce_values(topic, [v for v, _ in bad], partition=1)

    config = avro_pipeline(topic)
    execute_batch(spark, prepare_batch(config, props(), schemas=registry), props())
    out = spark.read.format("delta").load(config.table_uri)
    assert [c for c in out.columns if not c.startswith(("kafka_", "ingest"))] == ["order_id", "amount"]
    assert dict(out.dtypes)["order_id"] == "bigint" and dict(out.dtypes)["amount"] == "double"
    assert [(r.order_id, r.amount) for r in out_rows(spark, config.table_uri)] == [(i, i / 2) for i in range(4)]
    dead = out_rows(spark, config.dead_letter_uri)
    assert [(r.kafka_partition, r.kafka_offset) for r in dead] == [(1, i) for i in range(4)]
    for row, (value, error) in zip(dead, bad, strict=True):
        assert row.value == value and error in row.error, row.error

    # The producer adds an optional field (v2), then someone registers an incompatible v3.
    v2 = helpers.register_schema(subject, V2)
    helpers.set_compatibility(subject, "NONE")  # the registry's BACKWARD rule would refuse v3
    v3 = helpers.register_schema(subject, V3_RETYPED)
    helpers.produce_values(topic, [helpers.avro_value(v1, V1, {"order_id": 10, "amount": 5.0}),
                                   helpers.avro_value(v2, V2, {"order_id": 11, "amount": 5.5, "region": "eu"}),
                                   helpers.avro_value(v2, V2, {"order_id": 12, "amount": 6.0, "region": None}),
                                   helpers.avro_value(v3, V3_RETYPED, {"order_id": 13, "amount": "seven"})])
    ledger = Ledger(settings.ledger_uri())
    before = ledger.version()
    with pytest.raises(SchemaChangeError, match=r"field 'amount' is string in the schema but double in the table"):
        prepare_batch(config, props(), schemas=registry)  # the latest version (v3) is the reader by default
    assert ledger.version() == before, "a refused schema change must not freeze anything"

    pinned = avro_pipeline(topic, value_schema_version=2)
    plan = prepare_batch(pinned, props(), schemas=registry)
    assert plan.format.add_columns and [f.name for f in plan.format.fields] == ["order_id", "amount", "region"]
    execute_batch(spark, plan, props())
    rows = out_rows(spark, config.table_uri)
    assert [(r.order_id, r.amount, r.region) for r in rows if r.ingest_batch_id == 2] == [
        (10, 5.0, None), (11, 5.5, "eu"), (12, 6.0, None)]
    assert all(r.region is None for r in rows if r.ingest_batch_id == 1)
    dead = [r for r in out_rows(spark, config.dead_letter_uri) if r.ingest_batch_id == 2]
    assert len(dead) == 1 and f"schema id {v3} (version 3) cannot be read into the reader schema" in dead[0].error
    assert "field 'amount'" in dead[0].error
    # delta-rs (the ledger's and the page's reader) still reads the evolved table.
    assert helpers.query(config.table_uri, "SELECT COUNT(*) AS n, COUNT(region) AS r FROM t") == [{"n": 7, "r": 1}]
    committed = [r for r in ledger.rows(topic) if r.batch_id == 2]
    assert sum(r.record_count for r in committed) == 4 and sum(r.dead_letter_count for r in committed) == 1


def test_a_retry_decodes_with_the_frozen_schemas_while_the_registry_is_down(kafka_bootstrap, schema_registry, spark,
                                                                              lake):
    topic = helpers.create_topic(helpers.unique("avro-frozen"), partitions=1)
    v1 = helpers.register_schema(f"{topic}-value", V1)
    helpers.produce_values(topic, [helpers.avro_value(v1, V1, {"order_id": i, "amount": 1.0}) for i in range(3)])
    config = avro_pipeline(topic)
    frozen = prepare_batch(config, props(), schemas=RegistryClient(schema_registry), owner="run-that-crashed")
    # A later version in the registry changes nothing for the frozen batch.
    helpers.register_schema(f"{topic}-value", V2)
    down = RegistryClient(f"http://127.0.0.1:{helpers.free_port()}", timeout_s=2)
    retry = prepare_batch(config, props(), schemas=down, owner="next-run",  # recovers the crashed run's batch
                          run_state=lambda run: "failed")
    assert retry.recovered and retry.batch_id == frozen.batch_id and retry.format == frozen.format
    execute_batch(spark, retry, props())
    assert [(r.order_id, r.amount) for r in out_rows(spark, config.table_uri)] == [(i, 1.0) for i in range(3)]
    assert "region" not in spark.read.format("delta").load(config.table_uri).columns

    helpers.produce_values(topic, [helpers.avro_value(v1, V1, {"order_id": 3, "amount": 1.0})])
    before = Ledger(settings.ledger_uri()).version()
    with pytest.raises(SchemaRegistryUnavailableError, match=r"did not answer within 2 s.*Nothing was frozen"):
        prepare_batch(config, props(), schemas=down)  # a new batch needs the registry
    assert Ledger(settings.ledger_uri()).version() == before


def test_on_bad_record_fail_names_the_first_bad_avro_record(kafka_bootstrap, schema_registry, spark, lake):
    topic = helpers.create_topic(helpers.unique("avro-strict"), partitions=1)
    v1 = helpers.register_schema(f"{topic}-value", V1)
    helpers.produce_values(topic, [helpers.avro_value(v1, V1, {"order_id": 1, "amount": 1.0}), b"\x07junk"])
    config = avro_pipeline(topic, on_bad_record="fail")
    plan = prepare_batch(config, props(), schemas=RegistryClient(schema_registry))
    with pytest.raises(BadRecordsError, match=rf"{topic}:0@1: magic byte is 7, not 0"):
        execute_batch(spark, plan, props())
    assert helpers.query_or_none(config.table_uri) is None and helpers.query_or_none(config.dead_letter_uri) is None


KEY = {"type": "record", "name": "OrderKey", "fields": [{"name": "shop", "type": "string"},
                                                       {"name": "order_id", "type": "long"}]}


@pytest.mark.parametrize("key_schema", [KEY, "string"], ids=["record", "string"])
def test_avro_keys_become_a_key_column_and_a_bad_key_is_a_dead_letter(kafka_bootstrap, schema_registry, spark, lake,
                                                                       key_schema):
    topic = helpers.create_topic(helpers.unique("avro-keys"), partitions=1)
    value_id = helpers.register_schema(f"{topic}-value", V1)
    key_id = helpers.register_schema(f"{topic}-key", key_schema)

    def key(i: int):
        return {"shop": "eu", "order_id": i} if key_schema is KEY else f"order-{i}"

    def value(i: int) -> bytes:
        return helpers.avro_value(value_id, V1, {"order_id": i, "amount": i + 1.0})

    helpers.produce_pairs(topic, [(helpers.avro_value(key_id, key_schema, key(0)), value(0)),
                                  (None, value(1)),  # no key: a null `key`
                                  (b"\x09" + bytes(6), value(2)),
                                  (helpers.avro_value(key_id, key_schema, key(3)), value(3))])
    config = avro_pipeline(topic, key_format="avro")
    plan = prepare_batch(config, props(), schemas=RegistryClient(schema_registry))
    execute_batch(spark, plan, props())
    out = spark.read.format("delta").load(config.table_uri)
    assert out.columns[6:9] == ["key", "order_id", "amount"]
    rows = out_rows(spark, config.table_uri)
    decoded = [r.key.asDict() if key_schema is KEY and r.key is not None else r.key for r in rows]
    assert decoded == [key(0), None, key(3)] and [r.order_id for r in rows] == [0, 1, 3]
    assert rows[0].kafka_key == helpers.avro_value(key_id, key_schema, key(0))  # the bytes stay in kafka_key
    dead = out_rows(spark, config.dead_letter_uri)
    assert [(r.kafka_offset, r.error) for r in dead] == [(2, "kafka_key: magic byte is 9, not 0: not the Confluent "
                                                             "wire format")]
