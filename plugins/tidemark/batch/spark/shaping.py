"""The rows of a batch, shaped in Spark from what the Kafka source read: Kafka's metadata columns, the
value parsed (JSON with a declared schema, Avro with the batch's frozen schemas, or raw bytes) and, for
each bad record, why it is bad (the ``error`` column; null for a good one). Functions take DataFrames;
pyspark is imported lazily so the rest of the core never needs a JVM."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from tidemark.batch.spark import change_events, protobuf_udf
from tidemark.batch.spark.exact_values import Converted, exact_cast, json_field, json_read_type
from tidemark.formats.record_format import RecordFormat

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from tidemark.formats.frozen_schemas import FrozenSchemas


_CORRUPT = "__tidemark_corrupt"
"""The field ``from_json`` fills with the text of a value it could not parse whole."""


def _json_fields(parsed: Column, fmt: RecordFormat) -> dict[str, Converted]:
    """Each declared field as written to its column (``tidemark.batch.spark.exact_values.json_field``)."""
    return {f.name: json_field(f.name, parsed[f.name], f.type) for f in fmt.fields}


def _json_error(text: Column, parsed: Column, fmt: RecordFormat, fields: dict[str, Converted]) -> Column:
    """Why a JSON value is bad, null when it is good. ``from_json`` parses every value once; only a
    value that looks bad (not an object, a field it could not convert, a required field missing, a value
    its column would not hold exactly) goes through the checks that say why (``_json_errors``, which
    parse it again per field)."""
    from pyspark.sql import functions as F

    suspicious = parsed.isNull() | parsed[_CORRUPT].isNotNull() | ~F.ltrim(text).startswith("{")
    for f in fmt.fields:
        if f.required:
            suspicious = suspicious | parsed[f.name].isNull()
        if fields[f.name].bad is not None:
            suspicious = suspicious | fields[f.name].bad
    # The checks sit in the one branch only a suspicious value takes: Spark's subexpression elimination
    # hoists no expression out of a conditional branch, so a good value costs the cheap test above only.
    # The generated code must stay small for the JIT to compile the good path well: one copy of the test,
    # one get_json_object per field, and no null-if-empty here (``nullif`` repeats its argument: every
    # check twice); a suspicious value whose checks all pass gets "" here, made null by ``to_rows``.
    return F.when(suspicious, F.concat_ws("; ", *_json_errors(text, parsed, fmt, fields)))


def _json_text(text: Column, name: str) -> Column:
    """A top-level field's value as the record spells it (a string without its quotes), for a message:
    ``get_json_object`` would print a number through a double (123456789.5 as 1.234567895E8)."""
    from pyspark.sql import functions as F

    token = F.regexp_extract(text, rf'"{name}"\s*:\s*("(?:[^"\\]|\\.)*"|[^,}}\]\s]+)', 1)
    return F.coalesce(F.nullif(F.regexp_replace(token, r'^"(.*)"$', "$1"), F.lit("")),
                      F.get_json_object(text, f"$.{name}"))


def _json_errors(text: Column, parsed: Column, fmt: RecordFormat, fields: dict[str, Converted]) -> list[Column]:
    from pyspark.sql import functions as F

    errors = [F.when(F.get_json_object(text, "$").isNull() | ~F.ltrim(text).startswith("{"),
                     F.lit("value is not a JSON object"))]
    for f in fmt.fields:
        missing = F.lit(f"missing required field '{f.name}'") if f.required else F.lit(None).cast("string")
        check = (F.when(F.get_json_object(text, f"$.{f.name}").isNull(), missing)  # absent, or JSON null
                 .when(parsed[f.name].isNull(), F.concat(F.lit(f"field '{f.name}': '"), _json_text(text, f.name),
                                                         F.lit(f"' is not a valid {f.type}"))))
        if fields[f.name].bad is not None:
            check = check.when(fields[f.name].bad, fields[f.name].message)
        errors.append(check)
    return errors


_DECODED = "__tidemark_decoded"
"""A field added (with a default) to the Avro reader schema: true in every record that decoded, null
when ``from_avro`` (PERMISSIVE) failed, which it reports as a struct of nulls, not as a null."""


def _schema_id(column: str) -> Column:
    """The schema id of a value in the Confluent wire format, as a number: for messages only. A good record's
    tests compare its header bytes (``_id_is``, ``_magic_is_zero``), with no number or string made."""
    from pyspark.sql import functions as F

    return F.conv(F.hex(F.substring(column, 2, 4)), 16, 10).cast("long")


def _id_bytes(schema_id: int) -> Column:
    """A schema id as the 4 big-endian bytes of the wire format's header (a binary literal)."""
    from pyspark.sql import functions as F

    return F.expr(f"X'{schema_id:08X}'")


def _id_is(column: str, schema_id: int) -> Column:
    """Whether the header of a value in the wire format names this schema id: a compare of 4 bytes."""
    from pyspark.sql import functions as F

    return F.substring(column, 2, 4) == _id_bytes(schema_id)


def _avro_decoded(frozen: FrozenSchemas, column: str = "value") -> Column:
    """The value (or key) decoded with the writer schema of its own schema id, resolved into the
    reader schema (Spark's ``from_avro`` with ``avroSchema``): one branch per readable id. A record
    reader schema gets the ``_DECODED`` marker field."""
    import json

    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    reader = json.loads(frozen.reader)
    if isinstance(reader, dict) and reader.get("type") == "record":
        reader["fields"] = [*reader["fields"], {"name": _DECODED, "type": "boolean", "default": True}]
    options = {"mode": "PERMISSIVE", "avroSchema": json.dumps(reader)}
    body = F.expr(f"substring({column}, 6)")
    decoded = None
    for sid, writer in sorted(frozen.writers.items()):
        branch = from_avro(body, writer, options)
        decoded = (F.when(_id_is(column, int(sid)), branch) if decoded is None
                   else decoded.when(_id_is(column, int(sid)), branch))
    return decoded if decoded is not None else F.lit(None)


def _avro_error(frozen: FrozenSchemas, column: str = "value", parsed: str = "_parsed") -> Column:
    """Why an Avro value (or key) is bad (null when it is good), checked in order: the header, the
    schema id (frozen at plan time: unknown, or not readable into the reader schema), then the body.
    A null key is no error (records without a key); a null value is (a tombstone)."""
    import json

    from pyspark.sql import functions as F

    error = _wire_header_error(frozen, column, "value is null (a tombstone), not an Avro record")
    label, schema_id = "" if column == "value" else f"{column}: ", _schema_id(column)
    reader = json.loads(frozen.reader)
    failed = (F.col(parsed)[_DECODED].isNull() if isinstance(reader, dict) and reader.get("type") == "record"
              else F.col(parsed).isNull())  # a primitive reader: null means the body did not decode
    return error.when(failed, F.concat(
        F.lit(f"{label}the Avro body does not decode with schema id "), schema_id.cast("string")))


def _wire_header_error(frozen: FrozenSchemas, column: str, null_value: str) -> Column:
    """Why a value (or key) in the Confluent wire format is bad by its header (an open ``when`` chain, null when the
    header is good), checked in order: null (``null_value`` for a value; no error for a key), shorter than the
    header, the magic byte, the schema id (frozen at plan time: not readable into the reader, or unknown)."""
    from pyspark.sql import functions as F

    size, schema_id, header_id = F.octet_length(column), _schema_id(column), F.substring(column, 2, 4)
    magic = F.conv(F.hex(F.substring(column, 1, 1)), 16, 10)  # for the message only
    label = "" if column == "value" else f"{column}: "
    if column == "value":
        error = F.when(F.col(column).isNull(), F.lit(null_value))
    else:
        error = F.when(F.col(column).isNull(), F.lit(None).cast("string"))
    # A good record's tests compare bytes: its length, its first byte, its 4 id bytes with each known id's
    error = (error.when(size < 5, F.concat(F.lit(f"{label}value of "), size.cast("string"),
                                           F.lit(" bytes is shorter than the 5-byte Confluent header")))
             .when(F.substring(column, 1, 1) != F.expr("X'00'"), F.concat(
                 F.lit(f"{label}magic byte is "), magic, F.lit(", not 0: not the Confluent wire format"))))
    for sid, reason in sorted(frozen.unreadable.items()):
        error = error.when(header_id == _id_bytes(int(sid)), F.lit(label + reason))
    known = [_id_bytes(int(sid)) for sid in frozen.writers]
    error = error.when(~header_id.isin(*known) if known else F.lit(True), F.concat(
        F.lit(f"{label}schema id "), schema_id.cast("string"),
        F.lit(f" is not a version of subject '{frozen.subject}' in the Schema Registry (as of plan time)")))
    return error


def _without_marker(column: Column, frozen: FrozenSchemas) -> Column:
    """A decoded record without the ``_DECODED`` marker field."""
    import json

    reader = json.loads(frozen.reader)
    if not (isinstance(reader, dict) and reader.get("type") == "record"):
        return column
    return column.dropFields(_DECODED)


def to_rows(raw: DataFrame, fmt: RecordFormat, batch_id: int, ingested_at: dt.datetime) -> DataFrame:
    """Kafka rows -> the contract's ``kafka_*`` columns, the raw ``value``, the parsed payload
    fields (JSON), the batch columns, and ``error``: null for a good record, else why it is bad."""
    from pyspark.sql import functions as F

    rows = raw.select(
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("key").alias("kafka_key"),
        F.col("headers").alias("kafka_headers"),
        F.col("value"),
        F.lit(batch_id).cast("long").alias("ingest_batch_id"),
        F.lit(ingested_at).cast("timestamp").alias("ingested_at"),
    )
    errors: list[Column] = []
    if fmt.max_value_bytes is not None:
        size = F.coalesce(F.octet_length("value"), F.lit(0))
        errors.append(F.when(size > fmt.max_value_bytes, F.concat(
            F.lit("value of "), size.cast("string"), F.lit(f" bytes exceeds max_value_bytes ({fmt.max_value_bytes})"))))
    rows, fields, extra = _decode_value(rows, fmt, errors)
    if fmt.key_avro:
        rows = rows.withColumn("_key", _avro_decoded(fmt.key_avro, "kafka_key"))
        errors.append(_avro_error(fmt.key_avro, "kafka_key", "_key"))
        fields = {"key": _without_marker(F.col("_key"), fmt.key_avro), **fields}
    types = {f.name: f.type for f in fmt.fields} | ({"key": fmt.key_type} if fmt.key_type else {})
    for name, column_type in fmt.casts.items():  # schema_changes: lenient: a field whose type changed
        cast = exact_cast(name, fields[name], types[name], column_type)
        errors.append(F.when(cast.bad, cast.message))
        fields[name] = cast.value
    if fmt.keyed and not extra:  # a keyed table's operation (Debezium's came with its envelope)
        fields, errors, extra = change_events.shape(fmt, fields, errors)
    return _with_error(rows, {**fields, **extra}, errors, fmt)


def _decode_value(rows: DataFrame, fmt: RecordFormat, errors: list[Column]) -> tuple[DataFrame, dict, dict]:
    """The value's fields (JSON, Avro, Debezium's envelope in either; none for raw values), appending to
    ``errors`` why a value is bad; and the columns a Debezium envelope adds."""
    from pyspark.sql import functions as F

    debezium = fmt.keyed is not None and fmt.keyed.envelope == "debezium"
    if fmt.value_format == "json" and debezium:
        rows, fields, changes, extra = change_events.debezium_json(rows, fmt)
        errors += changes
        return rows, fields, extra
    if fmt.value_format == "json":  # with a JSON Schema from the registry: the text after the wire format's header
        text = (F.expr("substring(value, 6)") if fmt.json_schemas else F.col("value")).cast("string")
        read = ", ".join(f"`{f.name}` {json_read_type(f.type)}" for f in fmt.fields)
        rows = rows.withColumn("_parsed", F.from_json(text, f"{read}, `{_CORRUPT}` string", {
            "mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT, "allowNonNumericNumbers": "false"}))
        converted = _json_fields(F.col("_parsed"), fmt)
        body = _json_error(text, F.col("_parsed"), fmt, converted)
        errors.append(F.coalesce(_wire_header_error(fmt.json_schemas, "value", "value is null (a tombstone), not a "
                                                    "JSON object"), body) if fmt.json_schemas else body)
        return rows, {name: c.value for name, c in converted.items()}, {}
    if fmt.value_format == "avro" and debezium:  # Debezium's own tombstone is no bad value: it changes nothing
        rows = rows.withColumn("_parsed", _avro_decoded(fmt.avro))
        errors.append(F.when(F.col("value").isNotNull(), _avro_error(fmt.avro)))
        rows, fields, changes, extra = change_events.debezium_avro(rows, fmt, F.col("_parsed")[_DECODED].isNotNull())
        errors += changes
        return rows, fields, extra
    if fmt.value_format == "avro":
        rows = rows.withColumn("_parsed", _avro_decoded(fmt.avro))
        errors.append(_avro_error(fmt.avro))
        return rows, {f.name: F.col("_parsed")[f.name] for f in fmt.fields}, {}
    if fmt.value_format == "protobuf":  # one JVM UDF: the reader message's fields and why a record is bad
        rows = rows.withColumn("_parsed", protobuf_udf.decoded(rows.sparkSession, fmt.protobuf))
        errors.append(F.col("_parsed")["error"])
        return rows, {f.name: F.col("_parsed")["row"][f.name] for f in fmt.fields}, {}
    return rows, {}, {}


def _with_error(rows: DataFrame, fields: dict[str, Column], errors: list[Column], fmt: RecordFormat) -> DataFrame:
    """The rows with their fields and one ``error`` column: the reasons joined, null for a good record."""
    from pyspark.sql import functions as F

    kept = [c for c in rows.columns if c not in ("_parsed", "_key", "_env")]
    if len(errors) == 1 and fmt.value_format != "json":  # each check is null for a good record, never empty
        return rows.select(*kept, *[c.alias(n) for n, c in fields.items()], errors[0].cast("string").alias("error"))
    if not errors:
        return rows.select(*kept, *[c.alias(n) for n, c in fields.items()], F.lit(None).cast("string").alias("error"))
    # The reasons joined ("" when none applies), then "" made null in a projection of its own: Spark keeps
    # the two apart (it does not inline an expensive expression its consumer reads twice), so the checks
    # are computed once per record, not once per reference.
    why = errors[0] if len(errors) == 1 else F.concat_ws("; ", *errors)
    rows = rows.select(*kept, *[c.alias(n) for n, c in fields.items()], why.alias("_why"))
    return rows.select(*[c for c in rows.columns if c != "_why"], F.nullif(F.col("_why"), F.lit("")).alias("error"))
