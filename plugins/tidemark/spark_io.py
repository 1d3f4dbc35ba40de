"""The Spark side of a batch: read exactly the frozen ranges, shape the output rows, write them
with the batch's idempotency marker. Functions take the SparkSession; pyspark is imported lazily
so the rest of the core never needs a JVM."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidemark.commit import BatchPlan
from tidemark.offsets import spark_kafka_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Kafka client properties Spark must not be given (it manages them itself).
_SPARK_MANAGED = {"group.id", "auto.offset.reset", "key.deserializer", "value.deserializer",
                  "enable.auto.commit", "interceptor.classes"}

OUTPUT_COLUMNS = ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key",
                  "kafka_headers", "value", "ingest_batch_id", "ingested_at"]


def kafka_source_options(plan: BatchPlan, properties: Mapping[str, str],
                         isolation_level: str = "read_committed") -> dict[str, str]:
    """Every option of the Kafka source for this batch: the client properties as ``kafka.*``
    (security settings pass through), the isolation level, and the frozen offsets."""
    options = {f"kafka.{k}": str(v) for k, v in properties.items() if k not in _SPARK_MANAGED}
    options["kafka.isolation.level"] = isolation_level
    options["includeHeaders"] = "true"
    options["failOnDataLoss"] = "true"
    options.update(spark_kafka_options(plan.ranges))
    return options


def read_ranges(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    """A bounded batch read of the Kafka source with the given options."""
    return spark.read.format("kafka").options(**options).load()


def to_output(raw: DataFrame, batch_id: int, ingested_at: dt.datetime) -> DataFrame:
    """Kafka rows -> output rows: the contract's ``kafka_*`` columns, the raw value, the batch id."""
    from pyspark.sql import functions as F

    return raw.select(
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


def write_output(output: DataFrame, plan: BatchPlan) -> None:
    """Append the batch to the output table in one Delta commit that carries the idempotency
    marker (txnAppId = pipeline, txnVersion = batch id) and the ranges in userMetadata. Delta
    skips the write if the marker is already at or above this batch."""
    (output.write.format("delta").mode("append")
        .option("txnAppId", plan.pipeline)
        .option("txnVersion", str(plan.batch_id))
        .option("userMetadata", plan.commit_metadata())
        .save(plan.table_uri))
