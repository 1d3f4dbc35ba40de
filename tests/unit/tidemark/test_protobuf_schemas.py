"""Protobuf schemas frozen at plan time (tidemark.formats.protobuf_schemas, tidemark.formats.protobuf_types): each
version compiled by protoc into a descriptor set (well-known types and registry references included), the reader
message's fields as columns, which writer ids read into it and why the others do not, and the errors that say what to
do."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import descriptor_pb2

from tests.unit.tidemark.protobuf_samples import ORDER, ORDER_COLUMNS, ORDER_V2, FakeSource, registered
from tidemark.batch.schemas import BatchSchemas, batch_format
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import ConfigError, SchemaRegistryError
from tidemark.formats.protobuf_schemas import FrozenProtobuf, descriptor_set, file_name, freeze_protobuf
from tidemark.formats.protobuf_types import incompatibility, load_file, message_shape, messages_by_path
from tidemark.formats.records import Field


def proto(body: str, package: str = "shop") -> str:
    return f'syntax = "proto3";\npackage {package};\n{body}\n'


def test_protoc_builds_a_descriptor_set_with_the_well_known_types():
    schema = registered(1, 11, ORDER)
    files = [f.name for f in descriptor_pb2.FileDescriptorSet.FromString(descriptor_set(schema, FakeSource())).file]
    assert files == ["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto", file_name(schema)]


def test_references_are_written_beside_the_schema_transitively():
    money = registered(1, 21, proto("import \"units.proto\";\nmessage Money { int64 cents = 1; Unit unit = 2; }"),
                       subject="money", references=(("units.proto", "units", 3),))
    units = registered(3, 22, proto("message Unit { string name = 1; }"), subject="units")
    order = registered(1, 11, proto('import "common/money.proto";\nmessage Order { Money total = 1; }'),
                       references=(("common/money.proto", "money", 1),))
    source = FakeSource(money, units, order)
    built = load_file(descriptor_set(order, source), file_name(order))
    assert message_shape(messages_by_path(built)[(0,)]).fields[0][1].fields[1][0] == "unit"
    source.asked.clear()
    frozen = freeze_protobuf("orders", "orders-value", None, source)
    assert [(f.name, f.type) for f in frozen.fields()] == [
        ("total", "struct<`cents`:bigint,`unit`:struct<`name`:string>>")]
    assert source.asked == ["orders-value", "money", "units"]


@pytest.mark.parametrize(("references", "message"), [
    ((("money.proto", "money", 9),), r"reference 'money.proto' \(subject 'money' version 9\) is not in the registry"),
    ((("../etc/money.proto", "money", 1),), r"reference '../etc/money.proto' is not a relative .proto path"),
])
def test_a_reference_that_cannot_be_had_refuses_the_reader(references, message):
    order = registered(1, 11, proto('import "money.proto";\nmessage Order { int64 id = 1; }'), references=references)
    with pytest.raises(SchemaRegistryError, match=r"^pipeline 'orders': the value reader schema \(subject "
                                                  r"'orders-value' version 1 \(id 11\)\) cannot be used: " + message):
        freeze_protobuf("orders", "orders-value", None,
                        FakeSource(order, registered(1, 21, proto(""), subject="money")))


def test_the_latest_version_is_the_reader_and_its_first_message_gives_the_columns():
    source = FakeSource(registered(2, 12, ORDER_V2), registered(1, 11, ORDER))
    frozen = freeze_protobuf("orders", "orders-value", None, source)
    assert (frozen.subject, frozen.reader_id, frozen.reader_version, frozen.message) == ("orders-value", 12, 2,
                                                                                          "shop.Order")
    assert {f.name: f.type for f in frozen.fields()} == {**ORDER_COLUMNS, "region": "string"}
    assert all(not f.required for f in frozen.fields())  # a writer without the field reads null
    assert frozen.writers == {"11": [0], "12": [0]} and frozen.unreadable == {}
    assert frozen.versions == {"11": 1, "12": 2} and sorted(frozen.descriptors) == ["11", "12"]
    pinned = freeze_protobuf("orders", "orders-value", 1, source)
    assert pinned.reader_version == 1 and "region" not in {f.name for f in pinned.fields()}


def test_frozen_schemas_survive_the_ledgers_json():
    frozen = freeze_protobuf("orders", "orders-value", None, FakeSource(registered(1, 11, ORDER)))
    again = BatchSchemas.from_json(BatchSchemas(protobuf=frozen).to_json())
    assert again == BatchSchemas(protobuf=frozen) and again.value is None
    assert "protobuf" not in json.loads(BatchSchemas().to_json())  # an Avro batch's JSON is as before
    assert FrozenProtobuf.from_dict(json.loads(json.dumps(frozen.to_dict()))) == frozen


def test_the_reader_message_can_sit_at_another_path_in_a_writers_file():
    older = registered(1, 11, proto("message Refund { int64 id = 1; }\nmessage Order { int64 id = 1; }"))
    reader = registered(2, 12, proto("message Order { int64 id = 1; string note = 2; }\n"
                                     "message Refund { int64 id = 1; }"))
    frozen = freeze_protobuf("orders", "orders-value", None, FakeSource(older, reader))
    assert frozen.writers == {"11": [1], "12": [0]}


@pytest.mark.parametrize(("writer", "reason"), [
    ("message Order { string id = 1; }", "field 'id' is string in the writer's message but bigint in the reader's"),
    ("message Order { repeated int64 id = 1; }", "field 'id' is array<bigint> in the writer's message but bigint"),
    ("message Order { double id = 1; }", "field 'id' is double in the writer's message but bigint"),
    ("message Refund { int64 id = 1; }", "its file declares no message 'shop.Order'"),
    ("message Order { int64 id = 1 }", "protoc refuses it: tidemark_schema_11.proto:3:30: Expected \";\""),
])
def test_a_writer_that_cannot_be_read_as_the_reader_is_unreadable_with_the_reason(writer, reason):
    source = FakeSource(registered(1, 11, proto(writer)), registered(2, 12, proto("message Order { int64 id = 1; }")))
    frozen = freeze_protobuf("orders", "orders-value", None, source)
    assert list(frozen.writers) == ["12"] and list(frozen.descriptors) == ["12"]
    assert frozen.unreadable["11"].startswith("schema id 11 (version 1) cannot be read as the reader message "
                                              "'shop.Order' (version 2): ")
    assert reason in frozen.unreadable["11"]


@pytest.mark.parametrize(("writer", "reader"), [
    ("int32 id = 1;", "int64 id = 1;"),  # int widens to bigint
    ("float id = 1;", "double id = 1;"),
    ("int32 id = 1;", "double id = 1;"),
    ("uint32 id = 1;", "int64 id = 1;"),  # both bigint
    ("google.protobuf.Int64Value id = 1;", "int64 id = 1;"),
    ("Status id = 1; enum Status { A = 0; }", "string id = 1;"),  # an enum reads as its name
    ("int64 id = 1; string gone = 2;", "int64 id = 1;"),  # a field the reader lacks is not read
    ("int64 id = 1;", "int64 id = 1; string added = 2;"),  # a field the writer lacks reads null
    ("Inner x = 1; message Inner { int32 a = 1; }", "Inner x = 1; message Inner { int64 a = 1; string b = 2; }"),
])
def test_writers_whose_values_read_exactly_are_readable(writer, reader):
    header = 'import "google/protobuf/wrappers.proto";\n'
    source = FakeSource(registered(1, 11, proto(header + f"message Order {{ {writer} }}")),
                        registered(2, 12, proto(header + f"message Order {{ {reader} }}")))
    assert freeze_protobuf("orders", "orders-value", None, source).unreadable == {}


def test_map_keys_must_keep_their_type():
    def shape(text):
        file = load_file(descriptor_set(registered(1, 1, proto(text)), FakeSource()), "tidemark_schema_1.proto")
        return message_shape(messages_by_path(file)[(0,)])
    assert "the map's keys are int in the writer but string" in incompatibility(
        shape("message O { map<int32, string> m = 1; }"), shape("message O { map<string, string> m = 1; }"))


@pytest.mark.parametrize(("reader", "message"), [
    ("message Order { Order next = 1; int64 id = 2; }", r"field 'next': message 'shop.Order' contains itself"),
    ("message Order { Empty e = 1; } message Empty {}", r"field 'e': message 'shop.Empty' has no fields"),
    ("message Order {}", r"message 'shop.Order' has no fields"),
    ("message Order { int64 kafka_offset = 1; }", r"field name 'kafka_offset' clashes with a column Tidemark adds"),
    ("message Order { int64 value = 1; }", r"field name 'value' clashes with a column Tidemark adds"),
    ("enum Only { A = 0; }", r"its file declares no message"),
    ("message Order { strin id = 1; }", r"protoc refuses it: tidemark_schema_12.proto:3:17: \"strin\" is not defined"),
])
def test_a_reader_that_cannot_be_columns_names_pipeline_subject_version_and_what_to_do(reader, message):
    source = FakeSource(registered(1, 11, proto("message Order { int64 id = 1; }")), registered(2, 12, proto(reader)))
    with pytest.raises(SchemaRegistryError, match=r"^pipeline 'orders': the value reader schema \(subject "
                                                  r"'orders-value' version 2 \(id 12\)\) cannot be used: " + message +
                                                  r".*Nothing was frozen: register a version that protoc compiles"):
        freeze_protobuf("orders", "orders-value", None, source)


def test_a_subject_without_a_protobuf_version_says_what_it_holds():
    avro = FakeSource(registered(1, 11, '{"type": "string"}', "AVRO"))
    for source, kinds in ((FakeSource(), "none"), (avro, "AVRO")):
        with pytest.raises(SchemaRegistryError, match=rf"^pipeline 'orders': subject 'orders-value' has no Protobuf "
                                                      rf"schema in the Schema Registry \(its versions' types: {kinds}\)"
                                                      rf"\. Nothing was frozen: register the value schema with "
                                                      rf"schemaType PROTOBUF"):
            freeze_protobuf("orders", "orders-value", None, source)


def test_an_unknown_pinned_version_lists_the_subjects_versions():
    source = FakeSource(registered(1, 11, ORDER), registered(2, 12, ORDER_V2))
    with pytest.raises(SchemaRegistryError, match=r"^pipeline 'orders': value_schema_version 5 is not a Protobuf "
                                                  r"version of subject 'orders-value' \(versions: 1, 2\)"):
        freeze_protobuf("orders", "orders-value", 5, source)


def test_the_batch_format_carries_the_frozen_schemas_and_checks_the_keyed_block(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    frozen = BatchSchemas(protobuf=freeze_protobuf("orders", "orders-value", None,
                                                   FakeSource(registered(1, 11, ORDER))))
    config = parse_pipeline({"name": "orders", "topics": ["orders"], "table": "orders",
                             "value_format": "protobuf"}, "t")
    fmt = batch_format(config, frozen)
    assert fmt.value_format == "protobuf" and fmt.protobuf == frozen.protobuf
    assert fmt.fields[0] == Field("order_id", "bigint", False) and fmt.can_reject
    assert base64.b64decode(fmt.protobuf.descriptors["11"])
    with pytest.raises(SchemaRegistryError, match=r"Protobuf values need the schemas frozen with the batch"):
        batch_format(config, None)
    for block in ({"keys": ["order_id"]}, {"keys": ["order_id"], "envelope": "debezium"}):
        with pytest.raises(ConfigError, match=r"keyed needs value_format: json .* or avro, not 'protobuf'"):
            parse_pipeline({"name": "orders", "topics": ["orders"], "table": "orders", "value_format": "protobuf",
                            "keyed": block}, "t")


@pytest.mark.parametrize(("declared", "column"), [
    ("int32", "int"), ("sint32", "int"), ("sfixed32", "int"), ("int64", "bigint"), ("sint64", "bigint"),
    ("sfixed64", "bigint"), ("uint32", "bigint"), ("fixed32", "bigint"), ("uint64", "decimal(20,0)"),
    ("fixed64", "decimal(20,0)"), ("float", "float"), ("double", "double"), ("bool", "boolean"), ("string", "string"),
    ("bytes", "binary"), ("google.protobuf.Timestamp", "timestamp"), ("google.protobuf.DoubleValue", "double"),
    ("google.protobuf.FloatValue", "float"), ("google.protobuf.Int64Value", "bigint"),
    ("google.protobuf.UInt64Value", "decimal(20,0)"), ("google.protobuf.Int32Value", "int"),
    ("google.protobuf.UInt32Value", "bigint"), ("google.protobuf.BoolValue", "boolean"),
    ("google.protobuf.StringValue", "string"), ("google.protobuf.BytesValue", "binary"),
    ("google.protobuf.Duration", "struct<`seconds`:bigint,`nanos`:int>"),
    ("repeated google.protobuf.Timestamp", "array<timestamp>"),
    ("map<int32, google.protobuf.StringValue>", "map<int,string>"),
])
def test_each_protobuf_type_has_its_column_type(declared, column):
    imports = "".join(f'import "google/protobuf/{f}.proto";\n' for f in ("timestamp", "wrappers", "duration"))
    source = FakeSource(registered(1, 11, proto(f"{imports}message Order {{ {declared} f = 1; }}")))
    assert freeze_protobuf("orders", "orders-value", None, source).fields() == (Field("f", column, False),)
