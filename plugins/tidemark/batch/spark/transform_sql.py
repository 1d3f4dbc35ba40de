"""The Spark side of SQL transforms (``tidemark.config.transforms``): the batch's good records as the view ``records``,
the pipeline's SELECT over it, checked before Kafka is read, and the output's distinct coordinates per partition.

How the coordinates are followed through the SELECT: before the view is made, ``kafka_topic``,
``kafka_partition`` and ``kafka_offset`` get a column metadata tag naming them. Spark carries a column's
metadata wherever the column itself passes (``*``, a projection, a filter, ``explode``, a join, a GROUP BY
key) and drops it from any computed expression (``kafka_offset + 1 AS kafka_offset``, ``CAST``, a literal),
so an output column named ``kafka_offset`` that holds the tag ``kafka_offset`` is the record's offset. The
check reads only the analyzed schema: it works over Spark Connect too, and costs no job. The tags are
removed before the write (``DataFrame.to``), so the table's schema is as without a transform."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tidemark.config.transforms import BATCH_COLUMNS, COORDINATES, VIEW, missing_coordinates
from tidemark.errors import TransformError
from tidemark.formats.record_format import RecordFormat, output_columns
from tidemark.formats.records import DATE_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

TAG = "tidemark.coordinate"


_WRAPPERS = ("TASK_WRITE_FAILED",)
"""Error classes that only wrap the cause (a row's failure inside a write)."""


def spark_message(exc: BaseException) -> str:
    """Spark's own words: the first error class and its message that is not a wrapper (``[CAST_INVALID_INPUT]
    The value 'fr' ...``), else the first lines of the message, without the JVM's trace."""
    text = str(getattr(exc, "desc", None) or exc)
    for match in re.finditer(r"\[([A-Z][A-Z0-9_.]+)\] ([^\n]*)", text):
        if match.group(1) not in _WRAPPERS:
            return f"[{match.group(1)}] {match.group(2)}"[:800]
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith(("\tat ", "JVM stacktrace"))]
    return " ".join(lines[:6])[:1500]


def records_view(rows: DataFrame, fmt: RecordFormat, partition_by: list[str]) -> DataFrame:
    """The good records as the transform sees them: the columns the pipeline would write without it
    (``tidemark.formats.record_format.output_columns``: ``kafka_date`` too when it partitions the table); the
    coordinates tagged."""
    from pyspark.sql import functions as F

    good = rows.where("error IS NULL") if "error" in rows.columns else rows
    if DATE_COLUMN in partition_by:
        good = good.withColumn(DATE_COLUMN, F.to_date(F.col("kafka_timestamp")))
    return good.select(*[F.col(c).alias(c, metadata={TAG: c}) if c in COORDINATES else F.col(c)
                         for c in output_columns(fmt, partition_by)])


def apply(spark, rows: DataFrame, pipeline: str, fmt: RecordFormat, partition_by: list[str],
          batch_columns: list) -> DataFrame:
    """The transform over the batch's good records, analyzed (not run): a SELECT that does not parse or
    resolve, or that does not carry the coordinates through unchanged, or lacks a ``partition_by`` column,
    raises TransformError (terminal) before any job. ``batch_columns``: the ``ingest_batch_id`` and
    ``ingested_at`` columns (Spark Columns) set on every row."""
    from pyspark.sql.types import StructField, StructType

    records_view(rows, fmt, partition_by).createOrReplaceTempView(VIEW)
    try:
        shaped = spark.sql(fmt.transform or "")
        schema = shaped.schema  # the analysis: syntax, names, types (over Spark Connect: one round trip)
    except Exception as exc:
        if type(exc).__name__ not in ("AnalysisException", "ParseException", "IllegalArgumentException",
                                      "SparkConnectGrpcException", "PySparkTypeError", "PySparkValueError"):
            raise
        raise TransformError(f"the transform does not run: {spark_message(exc)}. Nothing was read or written; fix "
                             f"the pipeline file's transform (a SELECT over '{VIEW}') and run again.",
                             pipeline=pipeline) from None
    carried = {f.name: (f.metadata or {}).get(TAG) for f in schema.fields}
    missing = missing_coordinates(carried)
    if missing:
        raise TransformError(
            f"the transform's output does not carry {', '.join(missing)} through unchanged (it drops, renames or "
            f"computes them); Tidemark needs a record's coordinates on each of its rows to commit it exactly once. "
            f"Select them as they are (SELECT kafka_topic, kafka_partition, kafka_offset, ... FROM {VIEW}). Nothing "
            f"was read or written.", pipeline=pipeline)
    names = [f.name for f in schema.fields]
    if len({n.lower() for n in names}) != len(names):
        raise TransformError(f"the transform's output names a column twice ({', '.join(names)}); alias them "
                             f"apart. Nothing was read or written.", pipeline=pipeline)
    absent = [c for c in partition_by if c not in names]
    if absent:
        raise TransformError(f"partition_by names {', '.join(absent)}, which the transform's output lacks "
                             f"({', '.join(names)}); select it. Nothing was read or written.", pipeline=pipeline)
    plain = StructType([StructField(f.name, f.dataType, f.nullable) for f in schema.fields
                        if f.name not in BATCH_COLUMNS])
    return shaped.to(plain).select("*", *batch_columns)


def batch_columns(batch_id: int, ingested_at) -> list:
    """``ingest_batch_id`` and ``ingested_at``, as ``apply`` sets them on every row."""
    from pyspark.sql import functions as F

    return [F.lit(batch_id).cast("long").alias("ingest_batch_id"),
            F.lit(ingested_at).cast("timestamp").alias("ingested_at")]


def first_failing(spark, rows: DataFrame, pipeline: str, fmt: RecordFormat, partition_by: list[str],
                  batch_columns: list, ranges, steps: int = 24) -> tuple[str, str] | None:
    """Where a row-level failure of the transform lies and Spark's words for it (best effort, after a write
    failed): the first partition whose records fail it, then the first offset there by bisection over the cached
    records (``steps`` jobs at most, each computing every column: Spark's ``noop`` sink). None when no
    partition's records fail the transform on their own (the write failed for another reason)."""
    errors: list[str] = []

    def fails(where: str) -> bool:
        shaped = apply(spark, rows.where(where), pipeline, fmt, partition_by, batch_columns)
        try:
            shaped.write.format("noop").mode("overwrite").save()
        except Exception as exc:
            errors.append(spark_message(exc))
            return True
        return False

    for r in ranges:
        within = f"kafka_topic = '{r.topic}' AND kafka_partition = {int(r.partition)}"
        if not fails(within):
            continue
        lo, hi = r.start, r.end - 1  # the failure is at an offset <= hi; find the smallest prefix that fails
        for _ in range(steps):
            if lo >= hi:
                break
            mid = (lo + hi) // 2
            if fails(f"{within} AND kafka_offset <= {mid}"):
                hi = mid
            else:
                lo = mid + 1
        place = f"{r.topic}:{r.partition} at offset {hi}" if lo >= hi else f"{r.topic}:{r.partition} in {lo}..{hi}"
        return place, errors[-1]
    return None


def keyed_changes(spark, rows: DataFrame, pipeline: str, fmt: RecordFormat, partition_by: list[str],
                  batch_columns: list, keys: tuple[str, ...], order_by: tuple[str, ...]) -> tuple[DataFrame, list[str]]:
    """A keyed table's changes with the transform applied to its upserts (analyzed, not run): the transform
    sees the good upserts only; a delete (a tombstone, a ``delete_values`` match) passes untransformed, with
    its keys and ordering. The output must keep the keys and the ordering fields as decoded (name and type),
    else TransformError. Returns the changes (the rows' ``error`` and operation columns kept) and the columns
    the MERGE writes."""
    from pyspark.sql import functions as F

    from tidemark.batch.spark.merge import OP

    decoded = {f.name: f.dataType for f in rows.schema.fields}
    shaped = apply(spark, rows.where(f"{OP} = 'u'"), pipeline, fmt, partition_by, batch_columns)
    made = {f.name: f.dataType for f in shaped.schema.fields}
    changed = [c for c in (*keys, *order_by) if made.get(c) != decoded[c]]
    if changed:
        raise TransformError(f"on a keyed table the transform must keep the keys and ordering fields as decoded "
                             f"(name and type): {', '.join(changed)} {'is' if len(changed) == 1 else 'are'} missing "
                             f"or retyped in its output; a delete carries them as decoded. Nothing was read or "
                             f"written.", pipeline=pipeline)
    columns = list(shaped.columns)
    upserts = shaped.select(*columns, F.lit("u").alias(OP), F.lit(None).cast("string").alias("error"))
    kept = [*COORDINATES, *dict.fromkeys((*keys, *order_by)), *BATCH_COLUMNS]
    deletes = rows.where(f"{OP} <> 'u'").select(*[F.col(c) for c in kept], OP, "error")
    return upserts.unionByName(deletes, allowMissingColumns=True), columns


def keyed_counts(rows: DataFrame, changes: DataFrame) -> tuple[dict, dict]:
    """Per partition, the good upserts the transform gave no row (filtered), and the most rows it gave one record
    (more than one cannot be one change of a key). Two Spark jobs over the cached batch; a record that fails the
    transform fails the second."""
    from pyspark.sql import functions as F

    from tidemark.batch.spark.merge import OP
    from tidemark.kafka.offsets import TopicPartition

    part = ["kafka_topic", "kafka_partition"]
    read = {TopicPartition(r.kafka_topic, r.kafka_partition): int(r.n) for r in
            rows.where(f"error IS NULL AND {OP} = 'u'").groupBy(*part).agg(F.count(F.lit(1)).alias("n")).collect()}
    per_record = changes.where(f"{OP} = 'u'").groupBy(*COORDINATES).agg(F.count(F.lit(1)).alias("rows"))
    made = {TopicPartition(r.kafka_topic, r.kafka_partition): (int(r.n), int(r.most)) for r in
            per_record.groupBy(*part).agg(F.count(F.lit(1)).alias("n"), F.max("rows").alias("most")).collect()}
    filtered = {tp: n - made.get(tp, (0, 0))[0] for tp, n in read.items()}
    most = {tp: m for tp, (_, m) in made.items()}
    return filtered, most
