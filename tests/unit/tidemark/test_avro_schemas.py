"""avro_schemas: Spark types of Avro types, reader fields, schema resolution (checked against
fastavro, a real Avro implementation) and the Confluent wire format."""

from __future__ import annotations

import io
import json
import struct

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError

from tidemark.formats.avro_resolution import incompatibility
from tidemark.formats.avro_schemas import (
    HEADER_BYTES,
    MAGIC_BYTE,
    frame,
    parse,
    reader_fields,
    spark_type,
    unframe,
)
from tidemark.formats.records import Field

pytestmark = pytest.mark.unit


def record(name: str, *fields: dict, **extra) -> dict:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def field(name: str, avro_type, **extra) -> dict:
    return {"name": name, "type": avro_type, **extra}


def one(avro_type, **extra) -> dict:
    """A record with one field ``x``."""
    return record("Top", field("x", avro_type, **extra))


COLOR = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
ADDRESS = record("Address", field("city", "string"))

# --- schema resolution, against fastavro ----------------------------------------------------------

# (case, writer, reader, a record written with the writer schema, compatible?). For each incompatible
# pair the sample carries a value on the incompatible path, so a real reader must fail on it.
RESOLUTION = [
    ("field added with a default", record("Order", field("id", "long")),
     record("Order", field("id", "long"), field("region", "string", default="eu")), {"id": 1}, True),
    ("field added without a default", record("Order", field("id", "long")),
     record("Order", field("id", "long"), field("region", "string")), {"id": 1}, False),
    ("nullable field added with a null default", record("Order", field("id", "long")),
     record("Order", field("id", "long"), field("note", ["null", "string"], default=None)), {"id": 1}, True),
    ("nullable field added with a default for a later type", record("Order", field("id", "long")),
     record("Order", field("id", "long"), field("note", ["null", "string"], default="n/a")), {"id": 1}, True),
    ("field removed", record("Order", field("id", "long"), field("note", "string")),
     record("Order", field("id", "long")), {"id": 1, "note": "n"}, True),
    ("int -> long", one("int"), one("long"), {"x": 7}, True),
    ("int -> double", one("int"), one("double"), {"x": 7}, True),
    ("float -> double", one("float"), one("double"), {"x": 1.5}, True),
    ("string -> bytes", one("string"), one("bytes"), {"x": "abc"}, True),
    ("bytes -> string", one("bytes"), one("string"), {"x": b"abc"}, True),
    ("long -> int", one("long"), one("int"), {"x": 7}, False),
    ("double -> float", one("double"), one("float"), {"x": 1.5}, False),
    ("string -> double", one("string"), one("double"), {"x": "1.5"}, False),
    ("boolean -> int", one("boolean"), one("int"), {"x": True}, False),
    ("enum symbol removed, reader default", one(COLOR), one({**COLOR, "symbols": ["RED", "GREEN"], "default": "RED"}),
     {"x": "BLUE"}, True),
    ("enum symbol removed, no default", one(COLOR), one({**COLOR, "symbols": ["RED", "GREEN"]}), {"x": "BLUE"}, False),
    ("enum symbol added", one({**COLOR, "symbols": ["RED"]}), one(COLOR), {"x": "RED"}, True),
    ("enum renamed", one(COLOR), one({**COLOR, "name": "Colour"}), {"x": "RED"}, False),
    ("enum renamed with an alias", one({**COLOR, "namespace": "a"}),
     one({**COLOR, "name": "Colour", "namespace": "b", "aliases": ["a.Color"]}), {"x": "RED"}, True),
    ("enum in another namespace", one({**COLOR, "namespace": "a"}), one({**COLOR, "namespace": "b"}), {"x": "RED"},
     True),
    ("nested record gains a field", one(ADDRESS),
     one(record("Address", field("city", "string"), field("zip", "string", default=""))), {"x": {"city": "Oslo"}},
     True),
    ("nested record retypes a field", one(ADDRESS), one(record("Address", field("city", "int"))),
     {"x": {"city": "Oslo"}}, False),
    ("nested record renamed", one(ADDRESS), one(record("Location", field("city", "string"))),
     {"x": {"city": "Oslo"}}, False),
    ("nested record renamed with an alias", one(ADDRESS),
     one(record("Location", field("city", "string"), aliases=["Address"])), {"x": {"city": "Oslo"}}, True),
    ("array items promoted", one({"type": "array", "items": "int"}), one({"type": "array", "items": "long"}),
     {"x": [1, 2]}, True),
    ("array items retyped", one({"type": "array", "items": "string"}), one({"type": "array", "items": "double"}),
     {"x": ["a"]}, False),
    ("array of records", one({"type": "array", "items": ADDRESS}),
     one({"type": "array", "items": record("Address", field("city", "string"), field("n", "int", default=0))}),
     {"x": [{"city": "Oslo"}]}, True),
    ("map values promoted", one({"type": "map", "values": "int"}), one({"type": "map", "values": "double"}),
     {"x": {"a": 1}}, True),
    ("map values retyped", one({"type": "map", "values": "string"}), one({"type": "map", "values": "long"}),
     {"x": {"a": "b"}}, False),
    ("type -> nullable", one("string"), one(["null", "string"]), {"x": "s"}, True),
    ("nullable -> type", one(["null", "string"]), one("string"), {"x": None}, False),
    ("nullable -> nullable promoted", one(["null", "int"]), one(["null", "long"]), {"x": 3}, True),
    ("nullable null -> nullable promoted", one(["null", "int"]), one(["long", "null"]), {"x": None}, True),
    ("int -> nullable long", one("int"), one(["null", "long"]), {"x": 3}, True),
    ("int -> nullable string", one("int"), one(["null", "string"]), {"x": 3}, False),
    ("union branch the reader lacks", one(["int", "string"]), one(["null", "int"]), {"x": "s"}, False),
    ("union -> wider union", one(["int", "string"]), one(["string", "long", "null"]), {"x": "s"}, True),
    ("record -> nullable record", one(ADDRESS), one(["null", ADDRESS]), {"x": {"city": "Oslo"}}, True),
    ("field renamed with an alias", record("Order", field("total", "double")),
     record("Order", field("amount", "double", aliases=["total"])), {"total": 1.5}, True),
    ("field renamed without an alias", record("Order", field("total", "double")),
     record("Order", field("amount", "double")), {"total": 1.5}, False),
    ("record renamed with an alias", record("Order", field("id", "long")),
     record("Sale", field("id", "long"), aliases=["Order"]), {"id": 1}, True),
    ("record renamed", record("Order", field("id", "long")), record("Sale", field("id", "long")), {"id": 1}, False),
    ("same name, other namespace", record("Order", field("id", "long"), namespace="a"),
     record("Order", field("id", "long"), namespace="b"), {"id": 1}, True),
    ("fixed size changed", one({"type": "fixed", "name": "Hash", "size": 4}),
     one({"type": "fixed", "name": "Hash", "size": 8}), {"x": b"abcd"}, False),
    ("fixed in another namespace", one({"type": "fixed", "name": "Hash", "size": 4, "namespace": "a"}),
     one({"type": "fixed", "name": "Hash", "size": 4, "namespace": "b"}), {"x": b"abcd"}, True),
    ("fixed unchanged", one({"type": "fixed", "name": "Hash", "size": 4}),
     one({"type": "fixed", "name": "Hash", "size": 4}), {"x": b"abcd"}, True),
    ("named type reused by reference", record("Trip", field("start", ADDRESS), field("end", "Address")),
     record("Trip", field("start", ADDRESS), field("end", "Address")), {"start": {"city": "a"}, "end": {"city": "b"}},
     True),
]


def fastavro_reads(writer: dict, reader: dict, sample: dict) -> dict:
    buffer = io.BytesIO()
    schemaless_writer(buffer, parse_schema(writer), sample)
    buffer.seek(0)
    return schemaless_reader(buffer, parse_schema(writer), parse_schema(reader))


@pytest.mark.parametrize(("writer", "reader", "sample", "compatible"), [case[1:] for case in RESOLUTION],
                         ids=[case[0] for case in RESOLUTION])
def test_incompatibility_agrees_with_fastavro(writer, reader, sample, compatible):
    reason = incompatibility(writer, reader)
    assert (reason is None) == compatible, reason
    if compatible:
        fastavro_reads(writer, reader, sample)
    else:
        with pytest.raises(SchemaResolutionError):
            fastavro_reads(writer, reader, sample)


@pytest.mark.parametrize(("written", "read", "value", "bits"), [("int", "float", 2**24 + 1, 24),
                                                             ("long", "float", 2**24 + 1, 24),
                                                             ("long", "double", 2**53 + 1, 53)])
def test_a_promotion_that_can_change_a_value_is_refused_though_avro_allows_it(written, read, value, bits):
    # Avro promotes the value and changes it (fastavro reads a float as a Python float, so a 32-bit float is
    # packed here); Tidemark makes such records bad records instead.
    promoted = fastavro_reads(one(written), one(read), {"x": value})["x"]
    if read == "float":
        promoted = struct.unpack("<f", struct.pack("<f", promoted))[0]
    assert promoted != value
    reason = incompatibility(one(written), one(read))
    assert reason is not None and f"changes {written} values beyond 2**{bits}" in reason, reason


def test_decoded_values_follow_the_rules():
    reader = record("Order", field("amount", "double", aliases=["total"]), field("region", "string", default="eu"))
    assert fastavro_reads(record("Order", field("total", "int")), reader, {"total": 3}) == {"amount": 3.0,
                                                                                            "region": "eu"}
    with_default = one({**COLOR, "symbols": ["RED", "GREEN"], "default": "RED"})
    assert incompatibility(one(COLOR), with_default) is None
    assert fastavro_reads(one(COLOR), with_default, {"x": "BLUE"}) == {"x": "RED"}


def test_reasons_name_the_field_path():
    assert incompatibility(record("Order", field("amount", "string")), record("Order", field("amount", "double"))) == (
        "field 'amount': writer type string cannot be read as double")
    assert incompatibility(record("Order", field("id", "long")),
                           record("Order", field("id", "long"), field("region", "string"))) == (
        "field 'region': missing in the writer schema and has no default in the reader schema")
    nested = incompatibility(one({"type": "array", "items": ADDRESS}),
                             one({"type": "array", "items": record("Address", field("city", "int"))}))
    assert nested == "field 'x[].city': writer type string cannot be read as int"
    assert incompatibility(one(["null", "string"]), one("string")) == (
        "field 'x': writer type null cannot be read as string")
    assert "symbols BLUE" in incompatibility(one(COLOR), one({**COLOR, "symbols": ["RED", "GREEN"]}))
    assert "names differ" in incompatibility(record("Order", field("id", "long")), record("Sale", field("id", "long")))


def test_conservative_where_the_specification_fails_only_on_an_offending_value():
    # Avro fails these only when a record holds the string branch, or BLUE: we refuse the writer schema.
    union = (one(["int", "string"]), one("long"))
    assert incompatibility(*union) == "field 'x': writer type string cannot be read as long"
    assert fastavro_reads(*union, {"x": 3}) == {"x": 3}
    enum = (one(COLOR), one({**COLOR, "symbols": ["RED", "GREEN"]}))
    assert incompatibility(*enum) is not None
    assert fastavro_reads(*enum, {"x": "RED"}) == {"x": "RED"}
    # An alias is qualified by the reader's namespace: Avro's Java library (Spark's) then refuses
    # this enum rename, which fastavro (matching unqualified aliases) accepts.
    renamed = (one({**COLOR, "namespace": "a"}),
               one({**COLOR, "name": "Colour", "namespace": "b", "aliases": ["Color"]}))
    assert "names differ" in incompatibility(*renamed)
    assert fastavro_reads(*renamed, {"x": "RED"}) == {"x": "RED"}


@pytest.mark.parametrize(("writer", "reader", "compatible"), [
    ({"type": "long", "logicalType": "timestamp-millis"}, {"type": "long", "logicalType": "timestamp-micros"}, False),
    ({"type": "long", "logicalType": "timestamp-millis"}, {"type": "long", "logicalType": "local-timestamp-millis"},
     False),
    ({"type": "int", "logicalType": "date"}, {"type": "long", "logicalType": "timestamp-millis"}, False),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
     {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 3}, False),
    ({"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
     {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, False),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
     {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}, True),
    ("long", {"type": "long", "logicalType": "timestamp-millis"}, True),
    ({"type": "long", "logicalType": "timestamp-millis"}, "long", True),
    ({"type": "int", "logicalType": "date"}, {"type": "int", "logicalType": "date"}, True),
])
def test_a_logical_type_that_changes_meaning_is_refused(writer, reader, compatible):
    # Avro resolves these (logical types do not take part); the values would be reinterpreted.
    reason = incompatibility(one(writer), one(reader))
    assert (reason is None) == compatible, reason
    if not compatible:
        assert reason.startswith("field 'x': writer type ") and reason.endswith("(the values would change meaning)")


@pytest.mark.parametrize(("avro_type", "default"), [
    ("int", "zero"), ("int", 2**31), ("string", None), (["null", "string"], 3), (COLOR, "PINK"),
    (record("Address", field("city", "string")), {}), ({"type": "array", "items": "int"}, ["a"]),
    ({"type": "fixed", "name": "Hash", "size": 2}, "abc"),
])
def test_an_invalid_reader_default_is_no_default(avro_type, default):
    reason = incompatibility(record("Order", field("id", "long")),
                             record("Order", field("id", "long"), field("extra", avro_type, default=default)))
    assert reason is not None and reason.startswith("field 'extra': missing in the writer schema, and its default")


def test_a_recursive_record_resolves():
    node = record("Node", field("value", "int"), field("next", ["null", "Node"], default=None))
    wider = record("Node", field("value", "long"), field("next", ["null", "Node"], default=None))
    assert incompatibility(node, wider) is None
    assert fastavro_reads(node, wider, {"value": 1, "next": {"value": 2, "next": None}}) == {
        "value": 1, "next": {"value": 2, "next": None}}


def test_incompatibility_refuses_a_malformed_schema():
    with pytest.raises(ValueError, match="unknown Avro type 'Missing'"):
        incompatibility(one("Missing"), one("int"))


# --- Spark types ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("avro_type", "ddl"), [
    ("int", "int"),
    ("long", "bigint"),
    ("float", "float"),
    ("double", "double"),
    ("boolean", "boolean"),
    ("string", "string"),
    ("bytes", "binary"),
    (COLOR, "string"),
    ({"type": "fixed", "name": "Hash", "size": 16}, "binary"),
    (["null", "int"], "int"),
    (["long", "null"], "bigint"),
    (["string"], "string"),
    (["int", "long"], "bigint"),
    (["null", "float", "double"], "double"),
    (record("Point", field("a", "int"), field("b", ["null", "string"])), "struct<`a`:int,`b`:string>"),
    ({"type": "array", "items": ["null", "long"]}, "array<bigint>"),
    ({"type": "map", "values": "double"}, "map<string,double>"),
    ({"type": "map", "values": {"type": "array", "items": ADDRESS}}, "map<string,array<struct<`city`:string>>>"),
    ({"type": "int", "logicalType": "date"}, "date"),
    ({"type": "long", "logicalType": "timestamp-millis"}, "timestamp"),
    ({"type": "long", "logicalType": "timestamp-micros"}, "timestamp"),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, "timestamp_ntz"),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, "timestamp_ntz"),
    ({"type": "long", "logicalType": "timestamp-nanos"}, "bigint"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, "decimal(10,2)"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 7}, "decimal(7,0)"),
    ({"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 3},
     "decimal(18,3)"),
    # Invalid decimals are ignored (the Avro specification), as Spark 4.2 does: the bytes stay binary.
    ({"type": "fixed", "name": "D", "size": 2, "logicalType": "decimal", "precision": 18, "scale": 3}, "binary"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 6}, "binary"),
    ({"type": "int", "logicalType": "time-millis"}, "int"),
    ({"type": "string", "logicalType": "uuid"}, "string"),
    ({"type": "string", "logicalType": "date"}, "string"),
    ({"type": "int", "logicalType": "timestamp-millis"}, "int"),
])
def test_spark_type_follows_from_avro(avro_type, ddl):
    assert spark_type(avro_type) == ddl


def test_spark_type_resolves_named_types_by_namespace():
    names: dict = {}
    location = {**ADDRESS, "namespace": "geo"}
    assert spark_type(location, names, "com.acme") == "struct<`city`:string>"
    assert set(names) == {"geo.Address"}
    assert spark_type("geo.Address", names, "com.acme") == "struct<`city`:string>"
    assert spark_type("Address", names, "geo") == "struct<`city`:string>"
    assert spark_type({"type": "Address"}, names, "geo") == "struct<`city`:string>"
    with pytest.raises(ValueError, match="unknown Avro type 'Address'"):
        spark_type("Address", names, "com.acme")
    with pytest.raises(ValueError, match="'geo.Address' is defined twice"):
        spark_type(json.loads(json.dumps(location)), names, "com.acme")


@pytest.mark.parametrize(("avro_type", "message"), [
    (["int", "string"], "field 'x': unions of several types are not supported"),
    (["null", "int", "string"], "field 'x': unions of several types are not supported"),
    ({"type": "array", "items": ["int", COLOR]}, r"field 'x\[\]': unions of several types"),
    ("null", "field 'x': type null alone"),
    ({"type": "long", "logicalType": "time-micros"}, "field 'x': logical type time-micros is not supported"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}, "decimal precision 40 exceeds"),
    (record("Empty"), "field 'x': record 'Empty' has no fields"),
    (record("Node", field("next", ["null", "Node"])), "field 'x.next': record 'Node' contains itself"),
])
def test_spark_type_refuses_what_spark_cannot_store(avro_type, message):
    with pytest.raises(ValueError, match=message):
        spark_type(avro_type, field="x")


# --- reader fields and parsing -------------------------------------------------------------------

def test_reader_fields_are_typed_columns():
    schema = record("Order", field("id", "long"), field("note", ["null", "string"], default=None),
                    field("home", ADDRESS), field("work", ["null", "Address"]), namespace="com.acme")
    assert reader_fields(parse(json.dumps(schema))) == (
        Field("id", "bigint", True), Field("note", "string", False),
        Field("home", "struct<`city`:string>", True), Field("work", "struct<`city`:string>", False))


@pytest.mark.parametrize(("fields", "message"), [
    ([field("value", "bytes")], "field name 'value' clashes with a column Tidemark adds"),
    ([field("Kafka_Offset", "long")], "field name 'Kafka_Offset' clashes"),
    ([field("a-b", "int")], "field name 'a-b' must be letters, digits and _"),
    ([field("x" * 129, "int")], "must be letters, digits and _"),
    ([field("Amount", "int"), field("amount", "int")], "field 'amount' clashes with field 'Amount'"),
    ([field("choice", ["int", "string"])], "field 'choice': unions of several types are not supported"),
    ([field("at", {"type": "long", "logicalType": "time-micros"})], "field 'at': logical type time-micros"),
    ([field("self", ["null", "Top"])], "field 'self': record 'Top' contains itself"),
    ([], "the reader schema's record has no fields"),
])
def test_reader_fields_errors_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        reader_fields(record("Top", *fields))


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "the Avro schema is not JSON"),
    ('"string"', 'must be an Avro record at the top level .* not type "string"'),
    ('["null", "string"]', "must be an Avro record at the top level .* not a union"),
    (json.dumps(COLOR), 'must be an Avro record at the top level .* not type "enum"'),
    (json.dumps(one("Missing")), "unknown Avro type 'Missing'"),
    (json.dumps(record("Top", field("a", ADDRESS), field("b", ADDRESS))), "'Address' is defined twice"),
    (json.dumps(record("Top", {"name": "a"})), "'fields' must be a list of objects with a name and a type"),
    (json.dumps(one({"type": "enum", "name": "E"})), "enum 'E': 'symbols' must be a list of strings"),
    (json.dumps(one({"type": "fixed", "name": "F"})), "fixed 'F': 'size' must be an integer"),
    (json.dumps(one({"type": "array"})), "an Avro array needs 'items'"),
    (json.dumps(one([["int"]])), "cannot contain a union directly"),
    # Avro's Java library (Spark's) refuses such names; a Debezium topic prefix with a '-' gives them
    (json.dumps({**record("Envelope"), "namespace": "cdc-1.public.t"}),
     "Avro name 'cdc-1.public.t.Envelope' is not valid: 'cdc-1' must start with a letter or _ and hold only letters, "
     "digits and _ .from a Debezium connector: set schema.name.adjustment.mode=avro."),
    (json.dumps(one({"type": "fixed", "name": "2x", "size": 2})), "Avro name '2x' is not valid"),
])
def test_parse_refuses_what_is_not_a_value_schema(text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)


# --- the Confluent wire format -------------------------------------------------------------------

def test_frame_and_unframe_round_trip():
    value = frame(258, b"\x02body")
    assert value == b"\x00\x00\x00\x01\x02\x02body" and value[0] == MAGIC_BYTE
    assert unframe(value) == (258, b"\x02body")
    assert unframe(frame(7, b"")) == (7, b"")
    assert len(frame(7, b"")) == HEADER_BYTES


def test_unframe_says_why_a_value_is_not_framed():
    with pytest.raises(ValueError, match="^value of 3 bytes is shorter than the 5-byte header$"):
        unframe(b"\x00\x00\x01")
    with pytest.raises(ValueError, match="^magic byte is 123, not 0$"):
        unframe(b'{"a": 1}')
    with pytest.raises(ValueError, match="schema id -1"):
        frame(-1, b"")
