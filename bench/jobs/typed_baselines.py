"""The Spark baselines of typed values (bench/typed.py): the whole topic (earliest -> latest) decoded
into the same typed columns as a Tidemark pipeline, appended to a Delta table, with no bookkeeping.

--checkpoint: Structured Streaming with Trigger.AvailableNow into a Delta sink with that checkpoint;
without it, one plain Spark batch read. --decoder:

- from_json: Spark's ``from_json`` (PERMISSIVE) with the declared schema (--schema, a DDL string);
- from_avro: Spark's ``from_avro`` (PERMISSIVE) on the body after the Confluent wire format's 5-byte
  header, with the newest writer schema of --schemas-file (a JSON map: schema id -> schema text);
- fastavro: fastavro's ``schemaless_reader`` in ``mapInArrow`` (Arrow batches to Python workers), per
  record the header checked (magic byte 0, an id of --schemas-file) and the body decoded with that
  id's schema.

A record that does not parse or decode is kept, its fields null (there is no dead-letter table)."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from bench.jobs.common import session, source_options
from tidemark.batch.spark.shaping import to_rows
from tidemark.formats.avro_schemas import reader_fields
from tidemark.formats.record_format import RecordFormat
from tidemark.formats.records import BATCH_COLUMNS, KAFKA_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

_ARROW_TYPES = ("bigint", "int", "string", "double", "float", "boolean", "timestamp", "binary", "date")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="output Delta table (path)")
    parser.add_argument("--decoder", required=True, choices=["from_json", "from_avro", "fastavro"])
    parser.add_argument("--schema", help="from_json: the value's fields as a Spark DDL string")
    parser.add_argument("--schemas-file", help="Avro: JSON, schema id -> the writer schema (JSON text)")
    parser.add_argument("--checkpoint", help="streaming checkpoint folder: run as AvailableNow")
    return parser.parse_args()


def kafka_rows(raw: DataFrame) -> DataFrame:
    """The contract's ``kafka_*`` columns, the raw ``value`` and the batch columns (batch id fixed
    at 1), built by Tidemark's own function, as the other baselines do."""
    return to_rows(raw, RecordFormat(), 1, dt.datetime.now(dt.UTC)).drop("error")


def _record_rows(raw: DataFrame, record: Column) -> DataFrame:
    return kafka_rows(raw).select(*KAFKA_COLUMNS, record.alias("_record"), *BATCH_COLUMNS).select(
        *KAFKA_COLUMNS, "_record.*", *BATCH_COLUMNS)


def from_json_rows(raw: DataFrame, ddl: str) -> DataFrame:
    from pyspark.sql import functions as F

    return _record_rows(raw, F.from_json(F.col("value").cast("string"), ddl, {"mode": "PERMISSIVE"}))


def from_avro_rows(raw: DataFrame, schema_json: str) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    return _record_rows(raw, F.when(F.expr("substring(value, 1, 1) = X'00'"), from_avro(
        F.expr("substring(value, 6)"), schema_json, {"mode": "PERMISSIVE"})))


def _arrow_type(spark_type: str):
    import pyarrow as pa

    return {"bigint": pa.int64(), "int": pa.int32(), "string": pa.string(), "double": pa.float64(),
            "float": pa.float32(), "boolean": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC"),
            "binary": pa.binary(), "date": pa.date32()}[spark_type]


def _decode_record(value: bytes | None, parsed: dict, reader) -> dict | None:
    """One wire-format value decoded by fastavro's ``reader``; None when it is not the wire format or
    does not decode."""
    if value is None or len(value) < 5 or value[0] != 0:
        return None
    writer = parsed.get(int.from_bytes(value[1:5], "big"))
    if writer is None:
        return None
    body = io.BytesIO(value)
    body.seek(5)
    try:
        return reader(body, writer)
    except Exception:  # a body that does not decode: its fields stay null
        return None


def fastavro_rows(raw: DataFrame, writers: dict[int, str]) -> DataFrame:
    """The fields of the newest writer schema, typed as Tidemark types them, decoded in the Python workers."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    fields = reader_fields(json.loads(writers[max(writers)]))
    for f in fields:
        if f.type not in _ARROW_TYPES:
            raise SystemExit(f"field '{f.name}': type {f.type} is not handled by this benchmark job")
    rows = kafka_rows(raw).select(*KAFKA_COLUMNS, "value", *BATCH_COLUMNS)
    by_name = {f.name: f for f in rows.schema.fields}
    out_schema = StructType([*(by_name[c] for c in KAFKA_COLUMNS),
                             *(StructField(f.name, _parse_datatype_string(f.type), True) for f in fields),
                             *(by_name[c] for c in BATCH_COLUMNS)])
    names, types = [f.name for f in fields], [f.type for f in fields]

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from fastavro import parse_schema, schemaless_reader

        parsed = {sid: parse_schema(json.loads(text)) for sid, text in writers.items()}
        for batch in batches:
            records = [_decode_record(v, parsed, schemaless_reader) for v in batch.column("value").to_pylist()]
            decoded = [pa.array([None if r is None else r[name] for r in records], type=_arrow_type(t))
                       for name, t in zip(names, types, strict=True)]
            yield pa.RecordBatch.from_arrays(
                [*(batch.column(c) for c in KAFKA_COLUMNS), *decoded, *(batch.column(c) for c in BATCH_COLUMNS)],
                names=[*KAFKA_COLUMNS, *names, *BATCH_COLUMNS])

    return rows.mapInArrow(decode, out_schema)


def decoded_rows(raw: DataFrame, args: argparse.Namespace) -> DataFrame:
    if args.decoder == "from_json":
        return from_json_rows(raw, args.schema)
    writers = {int(sid): text for sid, text in json.loads(Path(args.schemas_file).read_text()).items()}
    return fastavro_rows(raw, writers) if args.decoder == "fastavro" else from_avro_rows(raw, writers[max(writers)])


def main() -> None:
    args = parse_args()
    spark = session()
    try:
        if args.checkpoint:
            raw = spark.readStream.format("kafka").options(**source_options(args.topic)).load()
            query = (decoded_rows(raw, args).writeStream.format("delta")
                     .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start(args.table))
            query.awaitTermination()
        else:
            raw = spark.read.format("kafka").options(**source_options(args.topic), endingOffsets="latest").load()
            decoded_rows(raw, args).write.format("delta").mode("append").save(args.table)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
