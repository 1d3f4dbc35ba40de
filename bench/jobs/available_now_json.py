"""Spark Structured Streaming with Trigger.AvailableNow on JSON values: the Kafka source, Spark's
``from_json`` (PERMISSIVE) with the declared schema (a DDL string, --schema), into a Delta sink with a
checkpoint. The same typed columns as a Tidemark JSON pipeline; a value that does not parse is kept,
its fields null (there is no dead-letter table, and nothing says why a row is empty)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from bench.jobs.available_now_avro import kafka_rows
from bench.jobs.common import session, source_options
from tidemark.records import BATCH_COLUMNS, KAFKA_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def parse_args(description: str, checkpoint: bool) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="output Delta table (path)")
    parser.add_argument("--schema", required=True, help="the value's fields as a Spark DDL string")
    if checkpoint:
        parser.add_argument("--checkpoint", required=True, help="streaming checkpoint folder")
    return parser.parse_args()


def from_json_rows(raw: DataFrame, ddl: str) -> DataFrame:
    """Kafka rows -> the Kafka columns, the value's fields parsed by ``from_json``, the batch columns."""
    from pyspark.sql import functions as F

    parsed = F.from_json(F.col("value").cast("string"), ddl, {"mode": "PERMISSIVE"})
    return kafka_rows(raw).select(*KAFKA_COLUMNS, parsed.alias("_record"), *BATCH_COLUMNS).select(
        *KAFKA_COLUMNS, "_record.*", *BATCH_COLUMNS)


def main() -> None:
    args = parse_args(__doc__ or "", checkpoint=True)
    spark = session()
    try:
        raw = spark.readStream.format("kafka").options(**source_options(args.topic)).load()
        query = (from_json_rows(raw, args.schema).writeStream.format("delta")
                 .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start(args.table))
        query.awaitTermination()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
