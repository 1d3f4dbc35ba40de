"""Plan-time schema knowledge (tidemark.batch.schemas): type spellings, the value fields against the output table's
columns under ``schema_changes``, and the Avro schemas a batch freezes (from a fake SchemaSource)."""

from __future__ import annotations

import json

import pytest

from tests.unit.tidemark.avro_samples import ORDER_ID, V1, V2, V3_NO_DEFAULT, record
from tidemark.batch.schemas import (
    Decision,
    SchemaChanges,
    check_changes,
    compare,
    delta_type,
    freeze_avro,
    normalize_type,
    subject_of,
)
from tidemark.errors import ConfigError, SchemaChangeError, SchemaRegistryError, is_transient
from tidemark.formats.frozen_schemas import FrozenSchemas
from tidemark.formats.records import Field
from tidemark.formats.schema_registry import RegisteredSchema

# --- type spellings --------------------------------------------------------------------------------


@pytest.mark.parametrize(("ddl", "normal"), [
    ("bigint", "long"), ("BIGINT", "long"), ("long", "long"),
    ("int", "integer"), ("integer", "integer"), ("smallint", "short"), ("tinyint", "byte"), ("real", "float"),
    ("float", "float"), ("double", "double"), ("string", "string"), ("boolean", "boolean"),
    ("date", "date"), ("timestamp", "timestamp"), ("timestamp_ntz", "timestamp_ntz"), ("binary", "binary"),
    ("decimal(12, 2)", "decimal(12,2)"), ("Decimal(12,2)", "decimal(12,2)"),
    ("array<int>", "array<integer>"), ("map<string, bigint>", "map<string,long>"),
    ("struct<`a`: bigint, `b`: array<int>>", "struct<a:long,b:array<integer>>"),
])
def test_normalize_type_gives_one_spelling_per_type(ddl, normal):
    assert normalize_type(ddl) == normal


def _col(name: str, spec, nullable: bool = True) -> dict:
    """A field of a Delta log's schema string (what ``DeltaTable.schema().to_json()`` holds)."""
    return {"name": name, "type": spec, "nullable": nullable, "metadata": {}}


@pytest.mark.parametrize(("spec", "normal"), [
    ("long", "long"), ("integer", "integer"), ("short", "short"), ("byte", "byte"), ("string", "string"),
    ("double", "double"), ("timestamp", "timestamp"), ("decimal(12,2)", "decimal(12,2)"),
    ({"type": "array", "elementType": "long", "containsNull": True}, "array<long>"),
    ({"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True}, "map<string,integer>"),
    ({"type": "struct", "fields": [_col("city", "string"), _col("zip", "integer")]},
     "struct<city:string,zip:integer>"),
    ({"type": "array", "containsNull": True,
      "elementType": {"type": "struct", "fields": [_col("sku", "string"), _col("qty", "long"),
                                                   _col("tags", {"type": "array", "elementType": "string",
                                                                 "containsNull": True})]}},
     "array<struct<sku:string,qty:long,tags:array<string>>>"),
    ({"type": "map", "keyType": "string", "valueContainsNull": True,
      "valueType": {"type": "struct", "fields": [_col("n", "long")]}}, "map<string,struct<n:long>>"),
])
def test_delta_type_reads_the_delta_logs_type(spec, normal):
    assert normalize_type(delta_type(spec)) == normal


def test_a_delta_column_and_the_same_spark_ddl_are_equal():
    """Spark writes ``struct<`a`:bigint,...>`` and the Delta log says ``{"type": "struct", ...}``."""
    spec = {"type": "struct", "fields": [_col("id", "long"), _col("lines", {
        "type": "array", "containsNull": True, "elementType": {"type": "struct", "fields": [
            _col("sku", "string"), _col("qty", "integer"), _col("price", "decimal(10,2)")]}})]}
    ddl = "struct<`id`:bigint,`lines`:array<struct<`sku`:string,`qty`:int,`price`:decimal(10,2)>>>"
    assert normalize_type(delta_type(spec)) == normalize_type(ddl)


def test_a_struct_columns_type_keeps_its_field_names_for_a_cast():
    spec = {"type": "struct", "fields": [_col("zipCode", "string")]}
    assert delta_type(spec) == "struct<`zipCode`:string>"


def test_a_nested_field_name_with_capitals_is_not_a_type_change():
    spec = {"type": "struct", "fields": [_col("zipCode", "string"), _col("int", "integer")]}
    ddl = "struct<`zipCode`:string,`int`:int>"  # avro_schemas.spark_type of a record {zipCode, int}
    assert compare([Field("address", ddl)], {"address": delta_type(spec)}) == SchemaChanges()


# --- compare and check_changes --------------------------------------------------------------------

TIDEMARK_COLUMNS = {"kafka_topic": "string", "kafka_partition": "integer", "kafka_offset": "long",
                    "kafka_timestamp": "timestamp", "kafka_key": "binary",
                    "kafka_headers": "array<struct<key:string,value:binary>>", "ingest_batch_id": "long",
                    "ingested_at": "timestamp", "kafka_date": "date"}


def table(**payload: str) -> dict[str, str]:
    """An output table's columns as ``table_columns`` returns them: Tidemark's own and the payload's."""
    return {**TIDEMARK_COLUMNS, **{n: delta_type(t) for n, t in payload.items()}}


def test_compare_finds_added_removed_and_retyped_fields():
    fields = [Field("order_id", "bigint"), Field("amount", "string"), Field("region", "string", required=False)]
    changes = compare(fields, table(order_id="long", amount="double", note="string"))
    assert changes == SchemaChanges(added=("region",), removed=("note",), retyped={"amount": ("double", "string")})


def test_compare_ignores_tidemarks_own_columns_and_type_synonyms():
    fields = [Field("order_id", "bigint"), Field("qty", "int"), Field("price", "decimal(10, 2)"),
              Field("small", "smallint"), Field("ratio", "real")]
    columns = table(order_id="long", qty="integer", price="decimal(10,2)", small="short", ratio="float")
    assert compare(fields, columns) == SchemaChanges()
    # A raw pipeline's ``value`` column is Tidemark's too: a JSON schema is not "removing" it.
    assert compare([Field("order_id", "bigint")], {**table(order_id="long"), "value": "binary"}) == SchemaChanges()


def test_compare_against_a_table_of_tidemark_columns_only_adds_every_field():
    fields = [Field("a", "string"), Field("b", "double")]
    assert compare(fields, TIDEMARK_COLUMNS) == SchemaChanges(added=("a", "b"))


def test_additive_refuses_and_names_every_removed_or_retyped_field():
    changes = SchemaChanges(added=("region",), removed=("note", "memo"),
                            retyped={"amount": ("double", "string"), "qty": ("long", "integer")})
    with pytest.raises(SchemaChangeError) as err:
        check_changes("orders", "/lake/orders", changes, "additive", "value_schema")
    message = str(err.value)
    assert message.startswith("pipeline 'orders': the value schema (value_schema) does not fit the output table "
                              "/lake/orders: ")
    for expected in ("field 'note' is no longer in the schema", "field 'memo' is no longer in the schema",
                     "field 'amount' is string in the schema but double in the table",
                     "field 'qty' is integer in the schema but long in the table",
                     "Nothing was frozen", "set 'schema_changes: lenient'"):
        assert expected in message
    assert "region" not in message  # an added field is no problem
    assert isinstance(err.value, ConfigError) and not is_transient(err.value)


def test_additive_takes_added_fields_and_lenient_returns_the_casts():
    assert check_changes("p", "/t", SchemaChanges(added=("region",)), "additive", "value_schema") == Decision()
    assert check_changes("p", "/t", SchemaChanges(), "additive", "value_schema") == Decision()
    changes = SchemaChanges(added=("region",), removed=("note",),
                            retyped={"amount": ("double", "string"), "qty": ("long", "integer")})
    assert check_changes("p", "/t", changes, "lenient", "value_schema") == Decision(
        casts={"amount": "double", "qty": "long"})
    assert check_changes("p", "/t", SchemaChanges(removed=("note",)), "lenient", "value_schema") == Decision()


@pytest.mark.parametrize("policy", ["additive", "lenient"])
def test_a_widening_widens_the_column_under_either_policy(policy):
    changes = SchemaChanges(retyped={"qty": ("integer", "bigint"), "ratio": ("float", "double"),
                                     "amount": ("long", "decimal(22,2)"), "price": ("decimal(10,2)", "decimal(12,3)")})
    assert check_changes("p", "/t", changes, policy, "value_schema") == Decision(
        widen={"qty": "bigint", "ratio": "double", "amount": "decimal(22,2)", "price": "decimal(12,3)"})


def test_bigint_to_double_is_refused_with_the_decimal_that_widens_instead():
    with pytest.raises(SchemaChangeError) as err:
        check_changes("orders", "/lake/orders", SchemaChanges(retyped={"amount": ("long", "double")}), "additive",
                      "value_schema")
    assert "field 'amount' is double in the schema but long in the table" in str(err.value)
    assert "a double holds integers exactly only up to 2**53" in str(err.value)
    assert "decimal(22,2)" in str(err.value)
    # Under lenient the field is written into the bigint column where that keeps its value.
    assert check_changes("p", "/t", SchemaChanges(retyped={"amount": ("long", "double")}), "lenient",
                         "value_schema") == Decision(casts={"amount": "long"})


# --- freeze_avro with a fake registry -------------------------------------------------------------

def registered(version: int, schema_id: int, schema: dict | str, schema_type: str = "AVRO",
               subject: str = "orders-value") -> RegisteredSchema:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return RegisteredSchema(subject, version, schema_id, text, schema_type)


class FakeSource:
    """A SchemaSource that answers the same versions for any subject and remembers what it was asked."""

    def __init__(self, *schemas: RegisteredSchema) -> None:
        self.schemas = list(schemas)
        self.asked: list[str] = []

    def versions(self, subject: str) -> list[RegisteredSchema]:
        self.asked.append(subject)
        return list(self.schemas)


def test_the_latest_version_is_the_reader_and_every_readable_version_a_writer():
    source = FakeSource(registered(2, 12, V2), registered(1, 11, V1))  # any order
    frozen = freeze_avro("orders", "orders-value", None, source)
    assert source.asked == ["orders-value"]
    assert (frozen.subject, frozen.reader_version, frozen.reader_id) == ("orders-value", 2, 12)
    assert json.loads(frozen.reader) == V2
    assert {k: json.loads(v) for k, v in frozen.writers.items()} == {"11": V1, "12": V2}
    assert frozen.unreadable == {}
    assert frozen.fields() == (Field("order_id", "bigint"), Field("amount", "double"),
                               Field("region", "string", required=False))


def test_a_pinned_version_is_the_reader():
    frozen = freeze_avro("orders", "orders-value", 1, FakeSource(registered(1, 11, V1), registered(2, 12, V2)))
    assert (frozen.reader_version, frozen.reader_id) == (1, 11)
    assert [f.name for f in frozen.fields()] == ["order_id", "amount"]
    assert sorted(frozen.writers) == ["11", "12"]  # v2's extra field is skipped when read as v1


def test_an_unknown_pinned_version_names_the_subjects_versions():
    source = FakeSource(registered(1, 11, V1), registered(2, 12, V2))
    with pytest.raises(SchemaRegistryError, match=r"^pipeline 'orders': value_schema_version 5 is not a version of "
                                                  r"subject 'orders-value' \(versions: 1, 2\)$"):
        freeze_avro("orders", "orders-value", 5, source)


def test_a_subject_without_an_avro_schema_is_refused():
    for source in (FakeSource(), FakeSource(registered(1, 11, '{"type": "object"}', "JSON"),
                                            registered(2, 12, "syntax = 'proto3';", "PROTOBUF"))):
        with pytest.raises(SchemaRegistryError, match=r"subject 'orders-value' has no Avro schema in the Schema "
                                                      r"Registry; register the value schema first"):
            freeze_avro("orders", "orders-value", None, source)


def test_versions_of_another_schema_type_are_left_out():
    source = FakeSource(registered(1, 11, V1, "avro"), registered(2, 12, '{"type": "object"}', "JSON"))
    frozen = freeze_avro("orders", "orders-value", None, source)
    assert (frozen.reader_version, list(frozen.writers), frozen.unreadable) == (1, ["11"], {})


def test_an_incompatible_writer_is_unreadable_with_a_reason_naming_the_field():
    source = FakeSource(registered(1, 11, V1), registered(2, 12, V2), registered(3, 13, V3_NO_DEFAULT))
    frozen = freeze_avro("orders", "orders-value", None, source)
    assert frozen.reader_version == 3 and sorted(frozen.writers) == ["13"]
    assert sorted(frozen.unreadable) == ["11", "12"]
    assert frozen.unreadable["11"] == ("schema id 11 (version 1) cannot be read into the reader schema (version 3): "
                                       "field 'country': missing in the writer schema and has no default in the "
                                       "reader schema")
    assert "field 'country'" in frozen.unreadable["12"]


def test_a_malformed_writer_schema_is_unreadable_not_fatal():
    frozen = freeze_avro("orders", "orders-value", None, FakeSource(registered(1, 11, "{not json"),
                                                                    registered(2, 12, V1)))
    assert list(frozen.writers) == ["12"]
    assert frozen.unreadable["11"].startswith("schema id 11 (version 1) cannot be read into the reader schema")
    assert "not JSON" in frozen.unreadable["11"]


@pytest.mark.parametrize(("reader", "message"), [
    (record(ORDER_ID, {"name": "kafka_offset", "type": "long"}),
     r"field name 'kafka_offset' clashes with a column Tidemark adds"),
    (record(ORDER_ID, {"name": "Ingested_At", "type": "string"}),
     r"field name 'Ingested_At' clashes with a column Tidemark adds"),
    (record(ORDER_ID, {"name": "value", "type": "bytes"}), r"field name 'value' clashes with a column Tidemark adds"),
    (record(ORDER_ID, {"name": "either", "type": ["long", "string"]}), r"unions of several types are not supported"),
    ({"type": "string"}, r"a value schema must be an Avro record"),
])
def test_a_reader_schema_that_cannot_be_columns_is_a_registry_error(reader, message):
    source = FakeSource(registered(1, 11, V1), registered(2, 12, reader))
    with pytest.raises(SchemaRegistryError, match=r"^pipeline 'orders': the (value )?reader schema \(subject "
                                                  r"'orders-value' version 2, id 12\) cannot be written as "
                                                  r"columns: .*" + message):
        freeze_avro("orders", "orders-value", None, source)


def test_frozen_schemas_round_trip_through_json():
    source = FakeSource(registered(1, 11, V1), registered(2, 12, V2), registered(3, 13, V3_NO_DEFAULT))
    frozen = freeze_avro("orders", "orders-value", 2, source)
    assert frozen.unreadable == {} and sorted(frozen.writers) == ["11", "12", "13"]
    text = frozen.to_json()
    assert sorted(json.loads(text)) == ["reader", "reader_id", "reader_version", "subject", "unreadable", "writers"]
    again = FrozenSchemas.from_json(text)
    assert again == frozen and again.fields() == frozen.fields()
    broken = freeze_avro("orders", "orders-value", None, source)
    assert FrozenSchemas.from_json(broken.to_json()) == broken and broken.unreadable


def test_subject_of_is_value_subject_or_the_topic_name_strategy():
    assert subject_of(None, ["orders"]) == "orders-value"
    assert subject_of("shop.Order", ["orders"]) == "shop.Order"
    assert subject_of("shop.Order", ["a", "b"]) == "shop.Order"
