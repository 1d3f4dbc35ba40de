"""A Debezium table's keys and columns from its records: the keys from the Kafka key (``keyed.keys`` left out: the
JsonConverter's key object, with or without its schema wrapper, or the Avro key's record; each must be a column of the
row), and the columns from the JsonConverter's schema wrapper (no ``value_schema``). Anything else is refused saying
what to do."""

from __future__ import annotations

import json

import pytest

from tidemark.config.keyed_tables import kafka_keys
from tidemark.formats.debezium import avro_key_fields, key_fields, merged_fields, wrapped_row_fields
from tidemark.formats.records import parse_field_type

WHERE = "cdc.public.orders partition 0 offset 7 or after"


@pytest.mark.parametrize("key", [
    b'{"id": 1, "region": "eu"}',
    json.dumps({"schema": {"type": "struct", "fields": [{"field": "id", "type": "int32"},
                                                          {"field": "region", "type": "string"}]},
                "payload": {"id": 1, "region": "eu"}}).encode(),
], ids=["plain", "schema-payload"])
def test_the_json_keys_fields_in_their_order(key):
    assert key_fields(key, WHERE) == ("id", "region")


@pytest.mark.parametrize(("key", "reason"), [
    (None, "has no Kafka key: its source table has no primary key"),
    (b"\x00\x00\x00\x00\x01\x02", "is not JSON (a key converter other than Kafka Connect's JsonConverter? With "
                                  "Avro keys, set key_format: avro)"),
    (b"42", "is not a JSON object of the primary key's fields"),
    (b"{}", "is not a JSON object of the primary key's fields"),
])
def test_a_key_that_is_no_json_object_is_refused_naming_the_record(key, reason):
    with pytest.raises(ValueError, match="cdc.public.orders partition 0 offset 7") as info:
        key_fields(key, WHERE)
    assert reason in str(info.value)


def test_the_avro_keys_record_fields():
    reader = json.dumps({"type": "record", "name": "Key", "fields": [{"name": "id", "type": "int"}]})
    assert avro_key_fields(reader) == ("id",)
    with pytest.raises(ValueError, match="not a record"):
        avro_key_fields('"string"')


def test_the_keys_must_be_columns_of_the_row_and_something_must_give_them():
    assert kafka_keys(None, ("id",), ["id", "name"]) == ("id",)
    reader = json.dumps({"type": "record", "name": "Key", "fields": [{"name": "sku", "type": "string"}]})
    with pytest.raises(ValueError, match=r"'sku' is not a column of the row \(id, name\); name the key columns"):
        kafka_keys(reader, ("id",), ["id", "name"])  # the Avro key wins over a JSON one
    with pytest.raises(ValueError, match="no record to read one from"):
        kafka_keys(None, None, ["id"])


def wrapped(columns: list[dict], payload: dict | None = None) -> bytes:
    """A Debezium event as the JsonConverter writes it with schemas.enable: the envelope's schema, then the payload."""
    row = {"type": "struct", "optional": True, "fields": columns}
    schema = {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"},
                                           {"type": "string", "field": "op"}]}
    return json.dumps({"schema": schema, "payload": payload or {"op": "c"}}).encode()


def test_the_rows_columns_from_the_json_converters_schema_each_nullable():
    columns = [{"type": "int32", "optional": False, "field": "id"}, {"type": "int16", "field": "qty"},
               {"type": "int64", "field": "big"}, {"type": "double", "field": "ratio"}, {"type": "float", "field": "f"},
               {"type": "boolean", "field": "ok"}, {"type": "string", "field": "name"},
               {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "field": "at"},
               {"type": "int32", "name": "io.debezium.time.Date", "field": "born"}, {"type": "int8", "field": "t"}]
    got = wrapped_row_fields(wrapped(columns), WHERE)
    assert [(f.name, f.type, f.required) for f in got] == [
        ("id", "int", False), ("qty", "smallint", False), ("big", "bigint", False), ("ratio", "double", False),
        ("f", "float", False), ("ok", "boolean", False), ("name", "string", False), ("at", "timestamp", False),
        ("born", "int", False), ("t", "tinyint", False)]


@pytest.mark.parametrize(("value", "reason"), [
    (b'{"op": "c", "after": {"id": 1}}', "carries no schema (Kafka Connect's JsonConverter writes one with "
                                         "value.converter.schemas.enable=true): enable it on the connector, or "
                                         "declare value_schema"),
    (b"{not json", "is not JSON"),
    (json.dumps({"schema": {"type": "struct", "fields": []}, "payload": {}}).encode(), "has no 'after' struct"),
    (wrapped([{"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "field": "price"}]),
     "column 'price' at cdc.public.orders partition 0 offset 7 or after is org.apache.kafka.connect.data.Decimal, "
     "which the JSON converter writes as base64 bytes: set the connector's decimal.handling.mode to string"),
    (wrapped([{"type": "bytes", "field": "blob"}]), "column 'blob' at cdc.public.orders partition 0 offset 7 or after "
                                                    "is a Kafka Connect bytes"),
    (wrapped([{"type": "array", "items": {"type": "int32"}, "field": "tags"}]), "is a Kafka Connect array"),
    (wrapped([{"type": "string", "field": "kafka_topic"}]), "clashes with a column Tidemark adds"),
])
def test_a_schema_the_columns_cannot_come_from_is_refused_saying_what_to_change(value, reason):
    with pytest.raises(ValueError) as info:
        wrapped_row_fields(value, WHERE)
    assert reason in str(info.value)


def test_several_records_schemas_are_one_the_newest_first():
    new = (parse_field_type("id", "bigint?"), parse_field_type("tier", "string?"))
    old = (parse_field_type("id", "int?"), parse_field_type("gone", "string?"))
    assert [(f.name, f.type) for f in merged_fields([new, old])] == [("id", "bigint"), ("tier", "string"),
                                                                      ("gone", "string")]
