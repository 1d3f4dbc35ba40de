"""The keyed-table baseline (bench/keyed_changes.py): Structured Streaming with Trigger.AvailableNow and a
``foreachBatch`` that MERGEs each micro-batch into an existing keyed Delta table, made idempotent the way
Delta advises for DML (delta-io/delta#1555): the SQL confs ``spark.databricks.delta.write.txnAppId`` and
``spark.databricks.delta.write.txnVersion`` set per micro-batch, the batch id as the version (DataFrame
writer options do not reach a MERGE).

Each micro-batch: the records' Kafka columns and the value's fields (``from_json``, PERMISSIVE, the
declared schema of --schema), a tombstone's key from the Kafka key (``{"id": 1}``); reduced to the newest
change per key (the highest offset: each key stays on one partition, as Kafka's partitioner puts it);
then one MERGE: a delete (a tombstone, or --delete-field holding --delete-value) deletes the matched row,
anything else updates every column of the matched row or inserts a new one. What a user writes by hand
beside Tidemark; it has no guard against re-reading older changes (a replay moves rows back).

--starting-offsets: the Kafka source's ``startingOffsets`` (JSON per partition), so that the stream reads
only the changes after the rows the table already holds."""

from __future__ import annotations

import argparse

from bench.jobs.common import session, source_options
from bench.jobs.typed_baselines import kafka_rows
from tidemark.formats.records import BATCH_COLUMNS, KAFKA_COLUMNS

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
OP = "__op"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="the existing keyed Delta table (path)")
    parser.add_argument("--checkpoint", required=True, help="streaming checkpoint folder")
    parser.add_argument("--schema", required=True, help="the value's fields as a Spark DDL string")
    parser.add_argument("--key", required=True, help="the key column (a field of the value)")
    parser.add_argument("--key-type", default="bigint")
    parser.add_argument("--delete-field", required=True)
    parser.add_argument("--delete-value", required=True)
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--app-id", required=True, help="txnAppId of the MERGE commits")
    return parser.parse_args()


def changes(raw, args: argparse.Namespace):
    """Kafka rows -> the table's columns (the value's fields between the Kafka and batch columns) and OP."""
    from pyspark.sql import functions as F

    rows = kafka_rows(raw)
    value = F.from_json(F.col("value").cast("string"), args.schema, {"mode": "PERMISSIVE"})
    key = F.from_json(F.col("kafka_key").cast("string"), f"`{args.key}` {args.key_type}")
    rows = rows.withColumn("_v", value).withColumn("_k", key)
    fields = [f.strip().split(" ")[0].strip("`") for f in args.schema.split(",")]
    tombstone = F.col("value").isNull()
    cols = [F.when(tombstone, F.col("_k")[args.key]).otherwise(F.col("_v")[args.key]).alias(n) if n == args.key
            else F.col("_v")[n].alias(n) for n in fields]
    op = F.when(tombstone | (F.col("_v")[args.delete_field] == args.delete_value), F.lit("d")).otherwise(F.lit("u"))
    return rows.select(*KAFKA_COLUMNS, *cols, *BATCH_COLUMNS, op.alias(OP)), [*KAFKA_COLUMNS, *fields, *BATCH_COLUMNS]


def merge_batch(args: argparse.Namespace, columns: list[str]):
    def apply(batch, batch_id: int) -> None:
        from delta.tables import DeltaTable
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        spark = batch.sparkSession  # the query's session: the confs must be set on it
        newest = (batch.withColumn("ingest_batch_id", F.lit(batch_id).cast("long"))
                  .withColumn("ingested_at", F.current_timestamp())
                  .withColumn("_n", F.row_number().over(Window.partitionBy(args.key).orderBy(
                      F.col("kafka_offset").desc())))
                  .where("_n = 1").drop("_n"))
        spark.conf.set(TXN_APP_ID, args.app_id)
        spark.conf.set(TXN_VERSION, str(batch_id))
        try:
            (DeltaTable.forPath(spark, args.table).alias("t")
             .merge(newest.alias("s"), f"t.`{args.key}` = s.`{args.key}`")
             .whenMatchedDelete(condition=f"s.{OP} = 'd'")
             .whenMatchedUpdate(condition=f"s.{OP} = 'u'", set={f"`{c}`": f"s.`{c}`" for c in columns})
             .whenNotMatchedInsert(condition=f"s.{OP} = 'u'", values={f"`{c}`": f"s.`{c}`" for c in columns})
             .execute())
        finally:
            spark.conf.unset(TXN_APP_ID)
            spark.conf.unset(TXN_VERSION)

    return apply


def main() -> None:
    args = parse_args()
    spark = session()
    try:
        raw = (spark.readStream.format("kafka").options(**source_options(args.topic))
               .option("startingOffsets", args.starting_offsets).load())
        rows, columns = changes(raw, args)
        query = (rows.writeStream.foreachBatch(merge_batch(args, columns))
                 .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
