"""Spark Structured Streaming with Trigger.AvailableNow on Avro values in the Confluent wire format:
the Kafka source, Spark's ``from_avro`` (PERMISSIVE) on the body after the 5-byte header with one
schema given as JSON, into a Delta sink with a checkpoint. The same typed columns as a Tidemark Avro
pipeline; a record that is not the wire format (first byte not 0) or does not decode is kept, its
fields null (there is no dead-letter table). The schema comes from a file (--schema-file)."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

from bench.jobs.common import session, source_options
from tidemark.records import BATCH_COLUMNS, KAFKA_COLUMNS, RecordFormat
from tidemark.spark_io import to_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def parse_args(description: str, checkpoint: bool) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="output Delta table (path)")
    parser.add_argument("--schema-file", required=True, help="the Avro schema (JSON) of every record")
    if checkpoint:
        parser.add_argument("--checkpoint", required=True, help="streaming checkpoint folder")
    return parser.parse_args()


def kafka_rows(raw: DataFrame) -> DataFrame:
    """The contract's ``kafka_*`` columns, the raw ``value`` and the batch columns (batch id fixed
    at 1), built by Tidemark's own function, as the other baselines do."""
    return to_rows(raw, RecordFormat(), 1, dt.datetime.now(dt.UTC)).drop("error")


def from_avro_rows(raw: DataFrame, schema_json: str) -> DataFrame:
    """Kafka rows -> the Kafka columns, the record's fields decoded by ``from_avro``, the batch columns."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    rows = kafka_rows(raw)
    decoded = F.when(F.expr("substring(value, 1, 1) = X'00'"),
                     from_avro(F.expr("substring(value, 6)"), schema_json, {"mode": "PERMISSIVE"}))
    return rows.select(*KAFKA_COLUMNS, decoded.alias("_record"), *BATCH_COLUMNS).select(
        *KAFKA_COLUMNS, "_record.*", *BATCH_COLUMNS)


def main() -> None:
    args = parse_args(__doc__ or "", checkpoint=True)
    schema_json = Path(args.schema_file).read_text()
    spark = session()
    try:
        raw = spark.readStream.format("kafka").options(**source_options(args.topic)).load()
        query = (from_avro_rows(raw, schema_json).writeStream.format("delta")
                 .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start(args.table))
        query.awaitTermination()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
