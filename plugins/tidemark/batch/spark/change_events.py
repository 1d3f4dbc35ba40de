"""A keyed batch's changes as the records give them (pyspark imported lazily): each decoded record's operation
(``OP``), and Debezium's change events read into the row they carry (docs/DESIGN.md, *Keyed tables*).

* ``shape`` (called by ``tidemark.batch.spark.shaping.to_rows``) adds each record's operation (``OP``: upsert, delete,
  or skip for Debezium's own tombstone) and makes a record without its key, or without its ordering, bad;
* ``debezium_json`` and ``debezium_avro`` read Debezium's change events (JSON with or without the
  converter's wrapper; Avro decoded with the batch's frozen envelope schema).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidemark.batch.spark.exact_values import json_field, json_read_type
from tidemark.config.keyed_tables import DEBEZIUM_OPS
from tidemark.formats.debezium import avro_envelope
from tidemark.formats.record_format import RecordFormat

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

OP = "__tidemark_op"
"""A change's operation: ``u`` (insert or update), ``d`` (delete) or ``s`` (changes nothing)."""


def _key_from_kafka_key(keys: tuple[str, ...], types: Mapping[str, str], fields: Mapping[str, Column],
                        key_type: str | None) -> dict[str, Column]:
    """A tombstone's key fields: from the decoded Avro key (``key_format: avro``: a record holding them, or for a
    single key field the key itself), else from the Kafka key as a JSON object (``{"id": 1}``), or, for a
    single key field, from the key's text."""
    from pyspark.sql import functions as F

    if key_type is not None and "key" in fields:
        decoded = fields["key"]
        if key_type.startswith("struct<") and all(f"`{k}`:" in key_type for k in keys):
            return {k: decoded[k] for k in keys}
        if len(keys) == 1 and not key_type.startswith("struct<"):
            return {keys[0]: decoded.cast(types[keys[0]])}
    text = F.col("kafka_key").cast("string")
    parsed = F.from_json(text, ", ".join(f"`{k}` {types[k]}" for k in keys))
    values = {k: parsed[k] for k in keys}
    if len(keys) == 1:
        values[keys[0]] = F.coalesce(values[keys[0]], text.try_cast(types[keys[0]]))
    return values


def shape(fmt: RecordFormat, fields: dict[str, Column], errors: list[Column]) -> tuple[dict, list, dict]:
    """A keyed pipeline's fields, errors and extra columns (``OP``). A tombstone (null value) deletes the row of
    its Kafka key; a ``delete_field`` holding a ``delete_values`` value deletes; anything else upserts. A
    record whose key fields or ordering fields are null is bad, naming the field."""
    from pyspark.sql import functions as F

    spec = fmt.keyed
    tombstone = F.col("value").isNull()
    errors = [F.when(~tombstone, e) for e in errors]  # a tombstone is a delete, not a bad value
    types = {f.name: f.type for f in fmt.fields}
    from_key = _key_from_kafka_key(spec.keys, types, fields, fmt.key_type)
    for k in spec.keys:
        fields[k] = F.when(tombstone, from_key[k]).otherwise(fields[k])
    op = F.when(tombstone, F.lit("d"))
    if spec.delete_field:
        op = op.when(fields[spec.delete_field].cast("string").isin(list(spec.delete_values)), F.lit("d"))
    op = op.otherwise(F.lit("u"))
    for k in spec.keys:
        errors.append(F.when(fields[k].isNull(), F.when(tombstone, F.lit(
            f"a tombstone whose Kafka key holds no key field '{k}' (a JSON object with it, or its value)")).otherwise(
                F.lit(f"key field '{k}' is missing or null"))))
    for o in spec.order_by:
        errors.append(F.when(~tombstone & fields[o].isNull(), F.lit(
            f"ordering field '{o}' is missing or null: the change cannot be ordered")))
    if spec.keeps_history:  # a version's valid_to comes from the next change's ordering, which a tombstone lacks
        errors.append(F.when(tombstone, F.lit(
            "a tombstone (null value) carries no ordering, and a history table (keyed.history) closes a version at "
            "the ordering of the delete: send deletes with the ordering field and keyed.delete_field instead")))
    return fields, errors, {OP: op}


def debezium_json(rows: DataFrame, fmt: RecordFormat) -> tuple[DataFrame, dict, list, dict]:
    """Debezium change events as JSON, with or without the converter's ``schema``/``payload`` wrapper: the
    declared fields of the row (``_debezium_changes``), each converted as a JSON value's field is."""
    from pyspark.sql import functions as F

    row = ", ".join(f"`{f.name}`: {json_read_type(f.type)}" for f in fmt.fields)
    parts = {"before": f"struct<{row}>", "after": f"struct<{row}>", "op": "string",
             "source": "struct<lsn: bigint, pos: bigint, ts_ms: bigint>"}
    envelope = ", ".join(f"{name} {kind}" for name, kind in parts.items())
    wrapped = ", ".join(f"{name}: {kind}" for name, kind in parts.items())
    parsed = F.from_json(F.col("value").cast("string"), f"{envelope}, payload struct<{wrapped}>")
    rows = rows.withColumn("_parsed", parsed)
    p = F.col("_parsed")
    env = F.when(p["payload"].isNotNull(), p["payload"]).otherwise(F.struct(*[p[n].alias(n) for n in parts]))
    rows = rows.withColumn("_env", env)
    e = F.col("_env")
    image = _image(e)
    converted = {f.name: json_field(f.name, image[f.name], f.type) for f in fmt.fields}
    position = F.coalesce(e["source"]["lsn"], e["source"]["pos"])
    fields, errors, extra = _debezium_changes(fmt, e, {n: c.value for n, c in converted.items()}, position)
    tombstone = F.col("value").isNull()
    errors += [F.when(~tombstone & c.bad, c.message) for c in converted.values() if c.bad is not None]
    return rows, fields, errors, extra


def debezium_avro(rows: DataFrame, fmt: RecordFormat, decoded: Column) -> tuple[DataFrame, dict, list, dict]:
    """Debezium change events as Avro, already decoded (by ``tidemark.batch.spark.shaping``, into ``_parsed``) with the
    batch's frozen envelope schema: the row's fields are the after image's (``fmt.fields``), the ordering the fields
    the schema's ``source`` has (``tidemark.formats.debezium.avro_envelope``). ``decoded``: the value decoded (why one
    did not is the Avro decoder's error, not repeated here)."""
    from pyspark.sql import functions as F

    envelope = avro_envelope(json.loads(fmt.avro.reader))
    e = F.col("_parsed")
    image = _image(e)
    position = F.coalesce(*[e["source"][n].cast("bigint") for n in envelope.position])
    fields, errors, extra = _debezium_changes(fmt, e, {f.name: image[f.name] for f in fmt.fields}, position, decoded)
    return rows, fields, errors, extra


def _image(e: Column) -> Column:
    """The row a change event carries: ``after``, or for a delete, ``before`` (whose key is the deleted row's)."""
    from pyspark.sql import functions as F

    return F.when(e["op"] == "d", e["before"]).otherwise(e["after"])


def _debezium_changes(fmt: RecordFormat, e: Column, fields: dict[str, Column], position: Column,
                      decoded: Column | None = None) -> tuple[dict, list, dict]:
    """The row's ``fields``, the operation and the ordering (``cdc_position``: ``position``; ``cdc_ts_ms``:
    ``source.ts_ms``) of the change events in ``e``, and why one is bad: no usable ``op``, image or ordering,
    or a null key field. Debezium's own tombstone (null value after a delete) changes nothing and is no error,
    nor is a value that did not decode (``decoded`` false: its decoder says why)."""
    from pyspark.sql import functions as F

    spec = fmt.keyed
    tombstone = F.col("value").isNull()
    unread = tombstone if decoded is None else tombstone | ~decoded
    image = _image(e)
    why = (F.when(unread, F.lit(None).cast("string"))
           .when(e["op"].isNull(), F.lit("not a Debezium change event (no 'op' field)"))
           .when(~e["op"].isin(*DEBEZIUM_OPS), F.concat(F.lit("Debezium operation '"), e["op"], F.lit(
               "' is not a row change (c, u, r or d)")))
           .when(image.isNull(), F.concat(F.lit("Debezium '"), e["op"], F.lit("' event without its "),
                                          F.when(e["op"] == "d", F.lit("before")).otherwise(F.lit("after")),
                                          F.lit(" image")))
           .when(position.isNull(), F.lit("Debezium event without source.lsn or source.pos: no usable ordering")))
    if spec.keeps_history:  # a version's valid_from and valid_to are times
        why = why.when(e["source"]["ts_ms"].isNull(), F.lit(
            "Debezium event without source.ts_ms: a history table (keyed.history) dates each version by it"))
    errors = [why]
    for k in spec.keys:
        errors.append(F.when(~unread & image.isNotNull() & fields[k].isNull(),
                             F.lit(f"key field '{k}' is missing or null")))
    fields = {**fields, "cdc_op": e["op"], "cdc_position": position,
              "cdc_ts_ms": e["source"]["ts_ms"].cast("bigint")}
    op = F.when(tombstone, F.lit("s")).when(e["op"] == "d", F.lit("d")).otherwise(F.lit("u"))
    return fields, errors, {OP: op}
