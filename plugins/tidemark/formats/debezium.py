"""Debezium change events, read before Spark starts (pure: stdlib only; the Spark side is
``spark_debezium``).

A Debezium event's value is an envelope: ``op`` (``c`` create, ``u`` update, ``r`` snapshot read, ``d``
delete), the row's images ``before`` and ``after`` (records of one type, the table's row), and ``source``,
where the change came from, which orders it: ``source.lsn`` (PostgreSQL's WAL position) or ``source.pos``
(MySQL's binlog position), then ``source.ts_ms``. As JSON, the pipeline's ``value_schema`` declares the
row's fields. As Avro (Kafka Connect's AvroConverter through a Schema Registry), the envelope's schema says
it all: ``avro_envelope`` finds the row's record, whose fields become the table's columns, and the ordering
fields the connector's ``source`` has.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.formats.avro_schemas import (  # the schema model's own helpers
    Names,
    Schema,
    _collect,
    _deref,
    _describe,
    _full_name,
    _is_null,
    _kind,
    _space,
)
from tidemark.formats.records import Field, parse_field_type

ENVELOPE_FIELDS = ("op", "before", "after", "source")
POSITION_FIELDS = ("lsn", "pos")
"""The ``source`` fields that order a connector's changes, in this order of preference."""
TIME_FIELD = "ts_ms"
"""The ``source`` field that orders changes of the same position (the commit time, ms)."""


@dataclass(frozen=True)
class AvroEnvelope:
    """Where a Debezium Avro envelope keeps what Tidemark reads."""

    row: dict
    """The row's record schema (the type of ``after``), standalone: its fields are the table's columns."""
    position: tuple[str, ...]
    """The ``source`` fields that order the changes, of ``POSITION_FIELDS`` those the schema has."""


def avro_envelope(schema: dict) -> AvroEnvelope:
    """The row and the ordering of a Debezium envelope's Avro schema (a parsed record). Raises ValueError
    saying what is missing when the schema is not such an envelope."""
    names: Names = {}
    _collect(schema, "", names)
    space = _space(_full_name(schema, ""))
    fields = {f["name"]: f["type"] for f in schema["fields"]}
    missing = [n for n in ENVELOPE_FIELDS if n not in fields]
    if missing:
        raise ValueError(f"the record has no field {', '.join(repr(n) for n in missing)}: a Debezium change event "
                         f"has {', '.join(ENVELOPE_FIELDS)}")
    if _value_kind(fields["op"], space, names) != "string":
        raise ValueError(f"field 'op' is {_describe(fields['op'], space, names)}, not a string")
    after, after_name = _record(fields["after"], space, names, "after")
    _, before_name = _record(fields["before"], space, names, "before")
    if before_name != after_name:
        raise ValueError(f"'before' is record '{before_name}' and 'after' record '{after_name}': a Debezium change "
                         f"event's images are rows of one type")
    source, source_name = _record(fields["source"], space, names, "source")
    inner = _space(source_name)
    available = {f["name"]: f["type"] for f in source["fields"]}
    position = tuple(n for n in POSITION_FIELDS if n in available)
    if not position:
        raise ValueError(f"'source' has no {' or '.join(POSITION_FIELDS)}: Tidemark orders a Debezium stream by "
                         f"source.lsn (PostgreSQL) or source.pos (MySQL), then source.ts_ms")
    for name in (*position, TIME_FIELD):
        if name not in available:
            raise ValueError(f"'source' has no {name}: Tidemark orders a Debezium stream by source.lsn or "
                             f"source.pos, then source.{TIME_FIELD}")
        if _value_kind(available[name], inner, names) not in ("int", "long"):
            raise ValueError(f"source.{name} is {_describe(available[name], inner, names)}, not an integer")
    row = {k: v for k, v in after.items() if k != "namespace"}
    return AvroEnvelope(row={**row, "name": after_name}, position=position)


def _value_kind(schema: Schema, namespace: str, names: Names) -> str:
    """The kind of a field's type, a union with null counting as its other branch."""
    schema, namespace, _ = _deref(schema, namespace, names)
    if isinstance(schema, list):
        others = [b for b in schema if not _is_null(_deref(b, namespace, names)[0])]
        if len(others) != 1:
            return "union"
        schema, namespace, _ = _deref(others[0], namespace, names)
    return _kind(schema)


def _record(schema: Schema, namespace: str, names: Names, field: str) -> tuple[dict, str]:
    """A field's record type (a union with null counting as its record) and its full name."""
    if _value_kind(schema, namespace, names) != "record":
        raise ValueError(f"field '{field}' is {_describe(schema, namespace, names)}, not a record (or null and a "
                         f"record)")
    if isinstance(schema, list):
        schema = next(b for b in schema if not _is_null(_deref(b, namespace, names)[0]))
    definition, _, full = _deref(schema, namespace, names)
    return definition, full or _full_name(definition, namespace)


TIME_TYPES = {("int", "io.debezium.time.Date"): "date",
              ("long", "io.debezium.time.MicroTimestamp"): "local-timestamp-micros",
              ("long", "io.debezium.time.Timestamp"): "local-timestamp-millis"}
"""Debezium's semantic time types (``connect.name`` on a plain int or long, as Kafka Connect's AvroConverter
writes them) and the Avro logical type that reads the same number as the same instant: days since the epoch as
a date; micro- or milliseconds since the epoch, a time without zone (PostgreSQL's ``timestamp``, MySQL's
``datetime``), as a timestamp without time zone. Other Debezium times stay as written: ``ZonedTimestamp`` is
an ISO-8601 string, ``MicroTime`` a long of microseconds since midnight, ``NanoTimestamp`` a long."""


def with_time_types(schema: Schema) -> Schema:
    """``schema`` (a parsed envelope) with the logical type of ``TIME_TYPES`` on each field whose type is one of
    Debezium's semantic time types and has no logical type yet. The binary encoding is the same, so records
    written with the plain type read with it; Spark reads the columns as ``date`` and ``timestamp_ntz``."""
    if isinstance(schema, list):
        return [with_time_types(b) for b in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    logical = TIME_TYPES.get((kind, schema.get("connect.name"))) if isinstance(kind, str) else None
    if logical is not None and "logicalType" not in schema:
        return {**schema, "logicalType": logical}
    out = dict(schema)
    if isinstance(out.get("type"), dict | list):
        out["type"] = with_time_types(out["type"])
    if isinstance(out.get("fields"), list):
        out["fields"] = [with_time_types(f) for f in out["fields"]]
    for part in ("items", "values"):
        if part in out:
            out[part] = with_time_types(out[part])
    return out


def key_fields(key: bytes | None, where: str) -> tuple[str, ...]:
    """The primary key's columns, from one Debezium record's Kafka key as the JsonConverter writes it: an object of
    the key's fields (``{"id": 1}``), or with ``schemas.enable`` that object as the ``payload`` beside its ``schema``.
    Raises ValueError naming ``where`` (the record's topic, partition and offset) when the key is no such object."""
    import json

    if key is None:
        raise ValueError(f"the record at {where} has no Kafka key: its source table has no primary key")
    try:
        data = json.loads(key)
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"the Kafka key at {where} is not JSON (a key converter other than Kafka Connect's "
                         f"JsonConverter? With Avro keys, set key_format: avro)") from None
    if isinstance(data, dict) and set(data) == {"schema", "payload"} and isinstance(data["payload"], dict):
        data = data["payload"]
    if not isinstance(data, dict) or not data:
        raise ValueError(f"the Kafka key at {where} is not a JSON object of the primary key's fields")
    return tuple(data)


def avro_key_fields(reader: str) -> tuple[str, ...]:
    """The primary key's columns from the Avro key's reader schema (a record: Kafka Connect's AvroConverter writes
    the key's fields as one). Raises ValueError when it is not a record."""
    import json

    schema = json.loads(reader)
    if not (isinstance(schema, dict) and schema.get("type") == "record" and schema.get("fields")):
        raise ValueError("the Avro key's reader schema is not a record of the primary key's fields")
    return tuple(f["name"] for f in schema["fields"])


CONNECT_TYPES = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint", "float": "float",
                 "double": "double", "boolean": "boolean", "string": "string"}
"""Kafka Connect's schema types (the JsonConverter's ``schema`` wrapper) -> the column type a field of the row takes.
Debezium's semantic types keep the type they are written as (a ``date`` is ``io.debezium.time.Date``, an int32 of
days; a ``timestamp`` a ``MicroTimestamp``, an int64 of microseconds), as for a hand-written ``value_schema``."""
SEMANTIC_TYPES = {"io.debezium.time.ZonedTimestamp": "timestamp"}
"""Semantic types read as another column type: ``timestamptz``'s ISO-8601 string as a timestamp."""
REFUSED_TYPES = {
    "org.apache.kafka.connect.data.Decimal": "set the connector's decimal.handling.mode to string (every digit kept)",
    "io.debezium.data.VariableScaleDecimal": "set the connector's decimal.handling.mode to string (every digit kept)",
}
"""Semantic types the JSON converter writes in a form no column type reads exactly, and what to change."""


def wrapped_row_fields(value: bytes, where: str) -> tuple[Field, ...]:
    """The row's columns from one Debezium event's JSON value with the JsonConverter's ``schema`` wrapper
    (``schemas.enable``): the fields of the ``after`` image's struct, each nullable (a delete's before image may hold
    the key alone). Raises ValueError naming ``where`` and the column, saying what to change."""
    import json

    try:
        data = json.loads(value)
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"the value at {where} is not JSON") from None
    if not (isinstance(data, dict) and isinstance(data.get("schema"), dict) and "payload" in data):
        raise ValueError(f"the value at {where} carries no schema (Kafka Connect's JsonConverter writes one with "
                         f"value.converter.schemas.enable=true): enable it on the connector, or declare value_schema")
    images = {f.get("field"): f for f in data["schema"].get("fields", []) if isinstance(f, dict)}
    after = images.get("after")
    if not (isinstance(after, dict) and after.get("type") == "struct" and after.get("fields")):
        raise ValueError(f"the value's schema at {where} has no 'after' struct: not a Debezium change event")
    fields = []
    for column in after["fields"]:
        name, kind, semantic = column.get("field"), column.get("type"), column.get("name")
        if semantic in REFUSED_TYPES:
            raise ValueError(f"column '{name}' at {where} is {semantic}, which the JSON converter writes as base64 "
                             f"bytes: {REFUSED_TYPES[semantic]}, or declare value_schema")
        declared = SEMANTIC_TYPES.get(semantic) or CONNECT_TYPES.get(kind)
        if declared is None:
            what = f"{kind} ({semantic})" if semantic else kind
            raise ValueError(f"column '{name}' at {where} is a Kafka Connect {what}, which Tidemark does not take "
                             f"from the data (a {kind} column: declare value_schema; bytes: set the connector's "
                             f"binary.handling.mode to base64 for a string)")
        fields.append(parse_field_type(str(name), declared + "?"))
    return tuple(fields)


def merged_fields(newest_first: list[tuple[Field, ...]]) -> tuple[Field, ...]:
    """Several records' columns as one schema: every column of any, in the newest record's order, then the older
    ones' own; a column's type is the newest record's."""
    seen: dict[str, Field] = {}
    for fields in newest_first:
        for f in fields:
            seen.setdefault(f.name, f)
    return tuple(seen.values())
