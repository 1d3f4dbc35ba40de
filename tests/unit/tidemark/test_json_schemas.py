"""JSON Schema from the registry (pure): a subject's schema as columns, and which writer versions a reader reads."""

from __future__ import annotations

import json

import pytest

from tidemark.formats.json_schemas import fields, incompatibility
from tidemark.formats.records import Field

pytestmark = pytest.mark.unit


def schema(properties: dict, required: list[str] = ()) -> str:
    return json.dumps({"type": "object", "properties": properties, "required": list(required)})


V1 = schema({"id": {"type": "integer"}, "name": {"type": "string"}, "price": {"type": "number"},
             "paid": {"type": "boolean"}, "at": {"type": "string", "format": "date-time"},
             "day": {"type": ["string", "null"], "format": "date"}}, ["id", "name", "day"])


def test_properties_become_columns_required_when_listed_and_not_nullable():
    assert fields(V1) == (Field("id", "bigint"), Field("name", "string"), Field("price", "double", False),
                          Field("paid", "boolean", False), Field("at", "timestamp", False),
                          Field("day", "date", False))


@pytest.mark.parametrize(("text", "says"), [
    ("not json", "it is not JSON"),
    (json.dumps({"type": "array"}), "top level must be"),
    (schema({"a": {"type": "object"}}), "property 'a' is an object"),
    (schema({"a": {"type": "array", "items": {"type": "string"}}}), "property 'a' is an array"),
    (schema({"a": {"$ref": "#/definitions/x"}}), "property 'a' uses $ref"),
    (schema({"a": {"type": ["string", "integer"]}}), "give one type"),
    (schema({"a": {"type": "decimal"}}), "unknown type 'decimal'"),
    (schema({"kafka_offset": {"type": "integer"}}), "clashes with a column Tidemark adds"),
])
def test_what_no_column_can_hold_is_refused_naming_the_property(text, says):
    with pytest.raises(ValueError, match=says.replace("$", r"\$")):
        fields(text)


def test_a_writer_is_readable_when_its_shared_properties_fit_and_it_has_every_required_one():
    v2 = schema({**json.loads(V1)["properties"], "note": {"type": "string"}}, ["id", "name", "day"])
    assert incompatibility(V1, v2) is None  # v2 adds an optional property: v1's records lack it, null
    assert incompatibility(v2, V1) is None  # and v1 reads v2's records, ignoring the new one
    narrower = schema({"id": {"type": "integer"}, "name": {"type": "string"}, "day": {"type": "string"},
                       "price": {"type": "integer"}}, ["id", "name", "day"])
    assert incompatibility(narrower, V1) == ("'price' is bigint there but double in the reader; 'day' is string "
                                             "there but date in the reader")  # bigint to double is no widening
    assert incompatibility(schema({"id": {"type": "integer"}}, ["id"]), V1) == (
        "it lacks 'name', which the reader requires")  # 'day' may be null: its absence is no problem
    assert incompatibility("[]", V1).startswith("its top level must be")
