"""A Debezium table's keys from the Kafka key (``keyed.keys`` left out): the JsonConverter's key object, with or
without its schema wrapper, or the Avro key's record; each must be a column of the row, and anything else is refused
saying what to do."""

from __future__ import annotations

import json

import pytest

from tidemark.config.keyed_tables import kafka_keys
from tidemark.formats.debezium import avro_key_fields, key_fields

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
