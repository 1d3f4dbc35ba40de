"""Debezium change events as Avro, before Spark starts (``tidemark.formats.debezium``): the envelope's row and ordering
read from its schema, and what a batch of a ``keyed.envelope: debezium`` pipeline freezes and refuses
(``tidemark.batch.schemas.batch_format``). Decoding in Spark is tested in tests/integration/test_keyed_tables.py
(hand-made events) and tests/integration/test_debezium.py (a real connector)."""

from __future__ import annotations

import json

import pytest

from tests.unit.tidemark.avro_samples import V1, debezium_envelope
from tidemark.batch.schemas import BatchSchemas, batch_format
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import ConfigError, SchemaRegistryError
from tidemark.formats import avro_schemas
from tidemark.formats.debezium import avro_envelope
from tidemark.formats.frozen_schemas import FrozenSchemas
from tidemark.formats.record_format import output_columns
from tidemark.formats.records import Field

ID = {"name": "id", "type": "int"}
NAME = {"name": "name", "type": ["null", "string"], "default": None}
AMOUNT = {"name": "amount", "type": ["null", {"type": "string", "connect.name": "io.debezium.data.Decimal"}],
          "default": None}


def test_a_postgresql_envelope_gives_the_after_images_row_ordered_by_lsn():
    envelope = avro_envelope(avro_schemas.parse(json.dumps(debezium_envelope(ID, NAME, AMOUNT))))
    assert envelope.position == ("lsn",)
    assert envelope.row["name"] == "shop.public.customers.Value" and "namespace" not in envelope.row
    assert avro_schemas.reader_fields(envelope.row) == (
        Field("id", "int"), Field("name", "string", required=False), Field("amount", "string", required=False))


def test_a_mysql_envelope_orders_by_pos():
    schema = debezium_envelope(ID, position="pos", position_type="long")
    assert avro_envelope(schema).position == ("pos",)


def test_the_row_keeps_its_own_named_types_when_taken_out_of_the_envelope():
    address = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
    schema = debezium_envelope(ID, {"name": "home", "type": address}, {"name": "work", "type": ["null", "Address"]})
    row = avro_envelope(avro_schemas.parse(json.dumps(schema))).row
    assert avro_schemas.reader_fields(row)[1:] == (Field("home", "struct<`city`:string>"),
                                                   Field("work", "struct<`city`:string>", required=False))


def _with_field(schema: dict, name: str, kind) -> dict:
    return {**schema, "fields": [f if f["name"] != name else {**f, "type": kind} for f in schema["fields"]]}


OTHER_ROW = {"type": "record", "name": "Other", "fields": [ID]}


@pytest.mark.parametrize(("schema", "message"), [
    (V1, "the record has no field 'op', 'before', 'after', 'source': a Debezium change event has op, before, "
         "after, source"),
    (_with_field(debezium_envelope(ID), "after", ["null", "string"]),
     "field 'after' is union [null, string], not a record"),
    (_with_field(debezium_envelope(ID), "after", ["null", OTHER_ROW]),
     "'before' is record 'shop.public.customers.Value' and 'after' record 'shop.public.customers.Other'"),
    (_with_field(debezium_envelope(ID), "op", "int"), "field 'op' is int, not a string"),
    (debezium_envelope(ID, position=None), "'source' has no lsn or pos: Tidemark orders a Debezium stream by"),
    (debezium_envelope(ID, position_type=("null", "string")), "source.lsn is union [null, string], not an integer"),
])
def test_what_is_not_a_debezium_envelope_is_refused_saying_why(schema, message):
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)")):
        avro_envelope(schema)


def test_an_envelope_without_the_source_time_is_refused():
    schema = debezium_envelope(ID)
    source = schema["fields"][2]["type"]
    source["fields"] = [f for f in source["fields"] if f["name"] != "ts_ms"]
    with pytest.raises(ValueError, match=r"'source' has no ts_ms"):
        avro_envelope(schema)


# --- what a batch freezes ---------------------------------------------------------------------------------------

def _pipeline(monkeypatch, tmp_path, keys: tuple[str, ...] = ("id",)):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path / "lake"))
    return parse_pipeline({"name": "customers", "topics": ["cdc.public.customers"], "table": "customers",
                           "value_format": "avro", "keyed": {"keys": list(keys), "envelope": "debezium"}},
                          "customers.yaml")


def _frozen(schema: dict) -> BatchSchemas:
    text = json.dumps(schema)
    return BatchSchemas(FrozenSchemas("cdc.public.customers-value", 7, 1, text, {"7": text}))


def test_a_debezium_avro_batch_has_the_rows_columns_and_the_cdc_columns(monkeypatch, tmp_path):
    config = _pipeline(monkeypatch, tmp_path)
    fmt = batch_format(config, _frozen(debezium_envelope(ID, NAME, AMOUNT)))
    assert fmt.fields == (Field("id", "int"), Field("name", "string", required=False),
                          Field("amount", "string", required=False))
    assert output_columns(fmt)[6:] == ["id", "name", "amount", "cdc_op", "cdc_position", "cdc_ts_ms",
                                       "ingest_batch_id", "ingested_at"]


def test_debeziums_time_types_are_read_as_dates_and_timestamps(monkeypatch, tmp_path):
    """The PostgreSQL connector writes ``date`` as an int of days and ``timestamp`` as a long of micro- (or milli-)
    seconds, marked only by ``connect.name``: the batch reads them as ``date`` and ``timestamp_ntz``; a
    ``timestamptz`` (an ISO-8601 string) and a ``time`` (microseconds since midnight) stay as written."""
    times = [{"name": "born", "type": ["null", {"type": "int", "connect.name": "io.debezium.time.Date"}],
              "default": None},
             {"name": "seen", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}},
             {"name": "old", "type": ["null", {"type": "long", "connect.name": "io.debezium.time.Timestamp"}],
              "default": None},
             {"name": "at", "type": ["null", {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}],
              "default": None},
             {"name": "opens", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTime"}}]
    config = _pipeline(monkeypatch, tmp_path)
    fmt = batch_format(config, _frozen(debezium_envelope(ID, *times)))
    assert {f.name: f.type for f in fmt.fields} == {"id": "int", "born": "date", "seen": "timestamp_ntz",
                                                    "old": "timestamp_ntz", "at": "string", "opens": "bigint"}
    reader = json.loads(fmt.avro.reader)  # what from_avro reads with: the same encoding, the logical types on
    value = reader["fields"][0]["type"][1]
    assert [f["type"] for f in value["fields"]][1:3] == [
        ["null", {"type": "int", "connect.name": "io.debezium.time.Date", "logicalType": "date"}],
        {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp", "logicalType": "local-timestamp-micros"}]
    assert fmt.avro.writers["7"] == _frozen(debezium_envelope(ID, *times)).value.writers["7"]


def test_keys_that_are_not_fields_of_the_after_image_are_refused_at_plan_time(monkeypatch, tmp_path):
    config = _pipeline(monkeypatch, tmp_path, keys=("customer_id",))
    with pytest.raises(SchemaRegistryError, match=r"keyed.keys: 'customer_id' not among the fields of the subject "
                                                  r"'cdc.public.customers-value' version 1 \(amount, id, name\)"):
        batch_format(config, _frozen(debezium_envelope(ID, NAME, AMOUNT)))


def test_plain_avro_records_under_envelope_debezium_are_refused_with_what_to_do(monkeypatch, tmp_path):
    with pytest.raises(SchemaRegistryError, match=r"keyed.envelope 'debezium' reads Debezium change events, and the "
                                                  r"value reader schema .* is not one: the record has no field 'op'.*"
                                                  r"or remove envelope for plain Avro records"):
        batch_format(_pipeline(monkeypatch, tmp_path), _frozen(V1))


def test_a_row_field_named_like_a_cdc_column_is_refused(monkeypatch, tmp_path):
    row = (ID, {"name": "cdc_op", "type": "string"})
    with pytest.raises(SchemaRegistryError, match=r"has a field 'cdc_op', a column that envelope 'debezium' adds"):
        batch_format(_pipeline(monkeypatch, tmp_path), _frozen(debezium_envelope(*row)))
    with pytest.raises(ConfigError, match=r"value_schema has a field 'cdc_op'"):  # the same rule for JSON
        parse_pipeline({"name": "c", "topics": ["c"], "table": "c", "value_format": "json",
                        "value_schema": {"id": "int", "cdc_op": "string"},
                        "keyed": {"keys": ["id"], "envelope": "debezium"}}, "c.yaml")
