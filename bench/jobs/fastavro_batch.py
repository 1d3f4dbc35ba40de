"""The decoder comparison: one Spark batch read of the whole topic (earliest -> latest, no bookkeeping)
of Avro values in the Confluent wire format, decoded by a Python decoder or by Spark's own, into the
same typed columns in a Delta table.

--decoder fastavro: fastavro's ``schemaless_reader`` in ``mapInArrow`` (Arrow batches to Python
workers): per record, the 5-byte header is checked (magic byte 0, a schema id known to the
--schemas-file, a JSON map id -> writer schema) and the body decoded with that id's parsed schema.
--decoder from_avro: Spark's ``from_avro`` (PERMISSIVE) on the body, as the AvailableNow baseline does.
A record that is not the wire format, has an unknown id or does not decode is kept, its fields null."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from bench.jobs.available_now_avro import from_avro_rows, kafka_rows
from bench.jobs.common import session, source_options
from tidemark.avro_schemas import reader_fields
from tidemark.records import BATCH_COLUMNS, KAFKA_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

_ARROW_TYPES = ("bigint", "int", "string", "double", "float", "boolean", "timestamp", "binary", "date")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="output Delta table (path)")
    parser.add_argument("--schemas-file", required=True, help="JSON: schema id -> the writer schema (JSON text)")
    parser.add_argument("--decoder", choices=["fastavro", "from_avro"], default="fastavro")
    return parser.parse_args()


def _arrow_type(spark_type: str):
    import pyarrow as pa

    return {"bigint": pa.int64(), "int": pa.int32(), "string": pa.string(), "double": pa.float64(),
            "float": pa.float32(), "boolean": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC"),
            "binary": pa.binary(), "date": pa.date32()}[spark_type]


def fastavro_rows(raw: DataFrame, writers: dict[int, str]) -> DataFrame:
    """Kafka rows -> the Kafka columns, the fields decoded by fastavro in the Python workers, the batch
    columns. The fields are those of the newest writer schema, typed as Tidemark types them."""
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
        import io

        import pyarrow as pa
        from fastavro import parse_schema, schemaless_reader

        parsed = {sid: parse_schema(json.loads(text)) for sid, text in writers.items()}
        arrow_types = [_arrow_type(t) for t in types]
        for batch in batches:
            columns: list[list] = [[] for _ in names]
            for value in batch.column("value").to_pylist():
                record = None
                if value is not None and len(value) >= 5 and value[0] == 0:
                    writer = parsed.get(int.from_bytes(value[1:5], "big"))
                    if writer is not None:
                        body = io.BytesIO(value)
                        body.seek(5)
                        try:
                            record = schemaless_reader(body, writer)
                        except Exception:  # a body that does not decode: its fields stay null
                            record = None
                if record is None:
                    for column in columns:
                        column.append(None)
                else:
                    for column, name in zip(columns, names, strict=True):
                        column.append(record[name])
            decoded = [pa.array(c, type=t) for c, t in zip(columns, arrow_types, strict=True)]
            yield pa.RecordBatch.from_arrays(
                [*(batch.column(c) for c in KAFKA_COLUMNS), *decoded, *(batch.column(c) for c in BATCH_COLUMNS)],
                names=[*KAFKA_COLUMNS, *names, *BATCH_COLUMNS])

    return rows.mapInArrow(decode, out_schema)


def main() -> None:
    args = parse_args()
    writers = {int(sid): text for sid, text in json.loads(Path(args.schemas_file).read_text()).items()}
    spark = session()
    try:
        raw = spark.read.format("kafka").options(**source_options(args.topic), endingOffsets="latest").load()
        rows = fastavro_rows(raw, writers) if args.decoder == "fastavro" else from_avro_rows(raw, writers[max(writers)])
        rows.write.format("delta").mode("append").save(args.table)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
