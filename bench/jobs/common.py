"""What the baseline jobs share with Tidemark's ingest job: the SparkSession (spark_jobs.ingest's
own builder), the Kafka client options (tidemark.batch.spark.batch_io's) and the output rows (the same
columns, built by the same function). Only the bookkeeping differs."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import TYPE_CHECKING

from tidemark.batch.job_settings import JobSettings
from tidemark.batch.plan import BatchPlan
from tidemark.batch.spark.batch_io import kafka_source_options
from tidemark.batch.spark.shaping import to_rows
from tidemark.formats.record_format import RecordFormat, output_columns
from tidemark.kafka.offsets import OffsetRange
from tidemark_spark.ingest_job import build_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_RANGE_OPTIONS = ("assign", "startingOffsets", "endingOffsets")


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="output Delta table (path)")
    parser.add_argument("--checkpoint", help="streaming checkpoint folder (AvailableNow only)")
    return parser.parse_args()


def session() -> SparkSession:
    return build_session()


def source_options(topic: str) -> dict[str, str]:
    """Tidemark's Kafka source options (client properties, isolation, timeouts, headers) with the
    frozen ranges replaced by a subscription to the whole topic from the earliest offset."""
    probe = BatchPlan("bench", 1, "unused", "unused", [OffsetRange(topic, 0, 0, 1)])
    options = kafka_source_options(probe, JobSettings.from_environment().kafka_properties, "read_committed")
    for key in _RANGE_OPTIONS:
        options.pop(key)
    return {**options, "subscribe": topic, "startingOffsets": "earliest"}


def output_rows(raw: DataFrame) -> DataFrame:
    """The same output columns as a Tidemark pipeline with raw values (batch id fixed at 1)."""
    fmt = RecordFormat()
    return to_rows(raw, fmt, 1, dt.datetime.now(dt.UTC)).select(*output_columns(fmt))
