"""The Spark side of a batch: read exactly the frozen ranges, shape the output rows, write them
with the batch's idempotency marker. Functions take the SparkSession; pyspark is imported lazily
so the rest of the core never needs a JVM."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidemark.batch.finalize import Tally
from tidemark.batch.plan import BatchPlan
from tidemark.kafka_client import java_client_properties
from tidemark.offsets import TopicPartition, spark_kafka_options, spark_min_partitions
from tidemark.records import DATE_COLUMN, DEAD_LETTER_COLUMNS, RecordFormat, output_columns

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

# Kafka client properties Spark must not be given (it manages them itself).
_SPARK_MANAGED = {"group.id", "auto.offset.reset", "key.deserializer", "value.deserializer",
                  "enable.auto.commit", "interceptor.classes"}

def kafka_source_options(plan: BatchPlan, properties: Mapping[str, str],
                         isolation_level: str = "read_committed") -> dict[str, str]:
    """Every option of the Kafka source for this batch: the client properties as ``kafka.*``
    (security settings pass through; reader options, never Spark configuration, so they reach
    neither the command line nor the event log), the isolation level, and the frozen offsets."""
    options = {f"kafka.{k}": v for k, v in java_client_properties(properties).items() if k not in _SPARK_MANAGED}
    options["kafka.isolation.level"] = isolation_level
    options["includeHeaders"] = "true"
    options["failOnDataLoss"] = "true"
    # Bounded waits: an unreachable or silent Kafka fails the batch within about the pipeline's
    # kafka_timeout_seconds (the connection's own settings win), instead of Spark's 3 x 60 s. When a
    # poll comes back empty, Spark's Kafka consumer first waits out pollTimeoutMs, then asks the
    # broker for the partition's offset range (bounded by default.api.timeout.ms) before it fails:
    # the two waits add up, so each gets half of the budget.
    half_ms = str(max(plan.kafka_timeout_seconds * 1000 // 2, 1000))
    for key in ("kafka.default.api.timeout.ms", "kafka.request.timeout.ms", "kafkaConsumer.pollTimeoutMs"):
        options.setdefault(key, half_ms)
    options.setdefault("fetchOffset.numRetries", "1")
    # A Spark task's consumer reaches the end of its range with a fetch in flight that the broker
    # holds for fetch.max.wait.ms (500 ms by default) for records that are not there: half a second
    # per task, most of a small batch's write (10,000 records on 8 partitions, on a warm Spark
    # Connect server: 2.7 s, 0.7 s at 10 ms). With records available the broker answers at once
    # either way. The connection's own setting wins.
    options.setdefault("kafka.fetch.max.wait.ms", "10")
    options.update(spark_kafka_options(plan.ranges))
    split = spark_min_partitions(plan.ranges, plan.max_offsets_per_task)
    if split:
        options["minPartitions"] = str(split)
    return options


def error_chain(exc: BaseException, limit: int = 5) -> str:
    """An exception and its causes (PySpark keeps the JVM cause in ``_cause``), one line each,
    without stacks: what a user needs to read in the task log."""
    parts, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(parts) < limit:
        seen.add(id(current))
        first = (str(current).strip().splitlines() or [""])[0].strip()
        parts.append(f"{type(current).__name__}: {first}")
        current = getattr(current, "_cause", None) or current.__cause__
    return " <- caused by ".join(parts)


def kafka_failure(exc: BaseException) -> str | None:
    """The Kafka client error inside a Spark/py4j failure (``TimeoutException: ...``), if it is one:
    its class and first message line only, never the whole Java stack."""
    match = re.search(r"org\.apache\.kafka\.common\.errors\.(\w+): ([^\n]*)", str(exc))
    return f"{match.group(1)}: {match.group(2).strip()}" if match else None


def read_ranges(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    """A bounded batch read of the Kafka source with the given options."""
    return spark.read.format("kafka").options(**options).load()


_CORRUPT = "__tidemark_corrupt"
"""The field ``from_json`` fills with the text of a value it could not parse whole."""


def _json_error(text: Column, parsed: Column, fmt: RecordFormat) -> Column:
    """Why a JSON value is bad, null when it is good. ``from_json`` parses every value once; only a
    value that looks bad (not an object, a field it could not convert, a required field missing)
    goes through the checks that say why (``_json_errors``, which parse it again per field)."""
    from pyspark.sql import functions as F

    suspicious = parsed.isNull() | parsed[_CORRUPT].isNotNull() | ~F.ltrim(text).startswith("{")
    for f in fmt.fields:
        if f.required:
            suspicious = suspicious | parsed[f.name].isNull()
    # Each check appears once, inside its own conditional branch: an expression that also appeared where it
    # is always evaluated would be hoisted by Spark's subexpression elimination and computed for every row.
    why = F.concat_ws("; ", *(F.when(suspicious, check) for check in _json_errors(text, parsed, fmt)))
    return F.when(why != "", why)


def _json_errors(text: Column, parsed: Column, fmt: RecordFormat) -> list[Column]:
    from pyspark.sql import functions as F

    errors = [F.when(F.get_json_object(text, "$").isNull() | ~F.ltrim(text).startswith("{"),
                     F.lit("value is not a JSON object"))]
    for f in fmt.fields:
        present = F.get_json_object(text, f"$.{f.name}").isNotNull()
        errors.append(F.when(present & parsed[f.name].isNull(), F.lit(f"field '{f.name}': not a valid {f.type}")))
        if f.required:
            errors.append(F.when(~present, F.lit(f"missing required field '{f.name}'")))
    return errors


_DECODED = "__tidemark_decoded"
"""A field added (with a default) to the Avro reader schema: true in every record that decoded, null
when ``from_avro`` (PERMISSIVE) failed, which it reports as a struct of nulls, not as a null."""


def _schema_id(column: str) -> Column:
    from pyspark.sql import functions as F

    return F.conv(F.hex(F.substring(column, 2, 4)), 16, 10).cast("long")


def _avro_decoded(frozen: dict, column: str = "value") -> Column:
    """The value (or key) decoded with the writer schema of its own schema id, resolved into the
    reader schema (Spark's ``from_avro`` with ``avroSchema``): one branch per readable id. A record
    reader schema gets the ``_DECODED`` marker field."""
    import json

    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    reader = json.loads(frozen["reader"])
    if isinstance(reader, dict) and reader.get("type") == "record":
        reader["fields"] = [*reader["fields"], {"name": _DECODED, "type": "boolean", "default": True}]
    options = {"mode": "PERMISSIVE", "avroSchema": json.dumps(reader)}
    body, schema_id = F.expr(f"substring({column}, 6)"), _schema_id(column)
    decoded = None
    for sid, writer in sorted(frozen["writers"].items()):
        branch = from_avro(body, writer, options)
        decoded = (F.when(schema_id == int(sid), branch) if decoded is None
                   else decoded.when(schema_id == int(sid), branch))
    return decoded if decoded is not None else F.lit(None)


def _avro_error(frozen: dict, column: str = "value", parsed: str = "_parsed") -> Column:
    """Why an Avro value (or key) is bad (null when it is good), checked in order: the header, the
    schema id (frozen at plan time: unknown, or not readable into the reader schema), then the body.
    A null key is no error (records without a key); a null value is (a tombstone)."""
    import json

    from pyspark.sql import functions as F

    size, schema_id = F.octet_length(column), _schema_id(column)
    magic = F.conv(F.hex(F.substring(column, 1, 1)), 16, 10)
    label = "" if column == "value" else f"{column}: "
    if column == "value":
        error = F.when(F.col(column).isNull(), F.lit("value is null (a tombstone), not an Avro record"))
    else:
        error = F.when(F.col(column).isNull(), F.lit(None).cast("string"))
    error = (error.when(size < 5, F.concat(F.lit(f"{label}value of "), size.cast("string"),
                                           F.lit(" bytes is shorter than the 5-byte Confluent header")))
             .when(magic != "0", F.concat(F.lit(f"{label}magic byte is "), magic,
                                          F.lit(", not 0: not the Confluent wire format"))))
    for sid, reason in sorted(frozen["unreadable"].items()):
        error = error.when(schema_id == int(sid), F.lit(label + reason))
    known = [int(sid) for sid in frozen["writers"]]
    error = error.when(~schema_id.isin(known) if known else F.lit(True), F.concat(
        F.lit(f"{label}schema id "), schema_id.cast("string"),
        F.lit(f" is not a version of subject '{frozen['subject']}' in the Schema Registry (as of plan time)")))
    reader = json.loads(frozen["reader"])
    failed = (F.col(parsed)[_DECODED].isNull() if isinstance(reader, dict) and reader.get("type") == "record"
              else F.col(parsed).isNull())  # a primitive reader: null means the body did not decode
    return error.when(failed, F.concat(
        F.lit(f"{label}the Avro body does not decode with schema id "), schema_id.cast("string")))


def _without_marker(column: Column, frozen: dict) -> Column:
    """A decoded record without the ``_DECODED`` marker field."""
    import json

    reader = json.loads(frozen["reader"])
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
    fields: dict[str, Column] = {}
    if fmt.value_format == "json":
        text = F.col("value").cast("string")
        rows = rows.withColumn("_parsed", F.from_json(text, f"{fmt.spark_ddl()}, `{_CORRUPT}` string", {
            "mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT, "allowNonNumericNumbers": "false"}))
        errors.append(_json_error(text, F.col("_parsed"), fmt))
    elif fmt.value_format == "avro":
        rows = rows.withColumn("_parsed", _avro_decoded(fmt.avro or {}))
        errors.append(_avro_error(fmt.avro or {}))
    if fmt.value_format != "raw":
        fields = {f.name: F.col("_parsed")[f.name] for f in fmt.fields}
    if fmt.key_avro:
        rows = rows.withColumn("_key", _avro_decoded(fmt.key_avro, "kafka_key"))
        errors.append(_avro_error(fmt.key_avro, "kafka_key", "_key"))
        fields = {"key": _without_marker(F.col("_key"), fmt.key_avro), **fields}
    for name, column_type in fmt.casts.items():  # schema_changes: lenient: a field whose type changed
        cast = fields[name].try_cast(column_type)
        errors.append(F.when(fields[name].isNotNull() & cast.isNull(), F.lit(
            f"field '{name}': value does not fit the output column's type {column_type}")))
        fields[name] = cast
    if errors:
        message = F.concat_ws("; ", *errors)
        error = F.when(message == "", F.lit(None).cast("string")).otherwise(message).alias("error")
    else:
        error = F.lit(None).cast("string").alias("error")
    kept = [c for c in rows.columns if c not in ("_parsed", "_key")]
    return rows.select(*kept, *[c.alias(n) for n, c in fields.items()], error)


def drop_already_written(spark: SparkSession, rows: DataFrame, plan: BatchPlan) -> DataFrame:
    """Remove records whose Kafka coordinates the output or dead-letter table already holds
    (re-reads after a reset back in time, backfills). Only the batch's ranges are looked up."""
    from pyspark.sql import functions as F

    from tidemark import storage

    within = None
    for r in plan.ranges:
        cond = ((F.col("kafka_topic") == r.topic) & (F.col("kafka_partition") == r.partition)
                & F.col("kafka_offset").between(r.start, r.end - 1))
        within = cond if within is None else within | cond
    keys = ["kafka_topic", "kafka_partition", "kafka_offset"]
    for uri in (plan.table_uri, plan.dead_letter_uri):
        if uri and storage.open_table(uri) is not None:  # delta-rs: works with a Spark Connect session too
            existing = spark.read.format("delta").load(uri).where(within).select(*keys)
            rows = rows.join(existing, on=keys, how="left_anti")
    return rows


def _write_observed(rows: DataFrame, plan: BatchPlan, *aggregates: Column, wait_s: float = 10.0) -> dict | None:
    """Write the output in one pass over Kafka while Spark computes ``aggregates`` over the rows it
    reads (an ``Observation`` of the same job). Returns their values, or None when Delta skipped the
    write because the output already holds the batch (its marker): then no job ran to observe."""
    import time

    from pyspark.sql import Observation

    observation = Observation(f"tidemark-{plan.pipeline}-{plan.batch_id}")
    write_output(rows.observe(observation, *aggregates), plan)
    if not hasattr(observation, "_jo"):  # Spark Connect: the metrics came back with the write's reply
        return dict(observation.get) or None  # none at all: Delta skipped the write
    deadline = time.monotonic() + wait_s
    while not observation._jo.future().isCompleted():  # get() would block for ever after a skipped write
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)
    return dict(observation.get)


def write_output_counting(rows: DataFrame, plan: BatchPlan) -> int | None:
    """Write the output in one pass while Spark counts the records it read (None: Delta skipped it)."""
    from pyspark.sql import functions as F

    observed = _write_observed(rows, plan, F.count(F.lit(1)).alias("records"))
    return None if observed is None else int(observed["records"])


BAD_RECORD_MARK = "TIDEMARK-BAD-RECORD"
"""Starts the message of the error a bad record raises inside the write under ``on_bad_record: fail``."""


def fail_on_bad_records(rows: DataFrame) -> DataFrame:
    """The rows, made to fail the Spark job at the first bad record it meets (``raise_error`` in a
    task: the job fails and Delta commits nothing), naming its coordinates and why."""
    from pyspark.sql import functions as F

    message = F.concat(F.lit(f"{BAD_RECORD_MARK} "), F.col("kafka_topic"), F.lit(":"),
                       F.col("kafka_partition").cast("string"), F.lit("@"), F.col("kafka_offset").cast("string"),
                       F.lit(": "), F.col("error"))
    return rows.where(F.coalesce(F.when(F.col("error").isNotNull(), F.raise_error(message)), F.lit(True)))


def write_output_tallying(rows: DataFrame, plan: BatchPlan) -> tuple[dict[TopicPartition, Tally], int] | None:
    """Write the batch's good rows in one pass over Kafka while Spark tallies every row it read, good
    and bad, per partition of the plan (records, bad records, offset span, bad records' span): one aggregate per
    partition and measure, so nothing is grouped or shuffled. Also returns how many records belong to
    no partition of the plan (never expected). None when Delta skipped the write (the output already
    holds the batch)."""
    from pyspark.sql import functions as F

    aggregates = [F.count(F.lit(1)).alias("total")]
    one_topic = len({r.topic for r in plan.ranges}) == 1  # then the partition number alone tells them apart
    for i, r in enumerate(plan.ranges):
        here = F.col("kafka_partition") == r.partition
        if not one_topic:
            here = (F.col("kafka_topic") == r.topic) & here
        bad = here & F.col("error").isNotNull()
        offset, bad_offset = F.when(here, F.col("kafka_offset")), F.when(bad, F.col("kafka_offset"))
        aggregates += [F.count_if(here).alias(f"n{i}"), F.count_if(bad).alias(f"b{i}"),
                       F.min(offset).alias(f"lo{i}"), F.max(offset).alias(f"hi{i}"),
                       F.min(bad_offset).alias(f"blo{i}"), F.max(bad_offset).alias(f"bhi{i}")]
    observed = _write_observed(rows, plan, *aggregates)
    if observed is None:
        return None
    tallies = {r.tp: Tally(int(observed[f"n{i}"]), int(observed[f"b{i}"]), observed[f"lo{i}"], observed[f"hi{i}"],
                           observed[f"blo{i}"], observed[f"bhi{i}"])
               for i, r in enumerate(plan.ranges) if observed[f"n{i}"]}
    return tallies, int(observed["total"]) - sum(t.records for t in tallies.values())


def tally(rows: DataFrame) -> dict[TopicPartition, Tally]:
    """Records, bad records and the offset span per partition (one Spark action)."""
    from pyspark.sql import functions as F

    result = rows.groupBy("kafka_topic", "kafka_partition").agg(
        F.count(F.lit(1)).alias("n"), F.count("error").alias("bad"),
        F.min("kafka_offset").alias("lo"), F.max("kafka_offset").alias("hi")).collect()
    return {TopicPartition(r.kafka_topic, r.kafka_partition): Tally(r.n, r.bad, r.lo, r.hi) for r in result}


def bad_examples(rows: DataFrame, limit: int = 5) -> list[str]:
    return [f"{r.kafka_topic}:{r.kafka_partition}@{r.kafka_offset}: {r.error}"
            for r in rows.where("error IS NOT NULL").orderBy("kafka_topic", "kafka_partition", "kafka_offset")
            .select("kafka_topic", "kafka_partition", "kafka_offset", "error").limit(limit).collect()]


def _append_once(frame: DataFrame, table_uri: str, plan: BatchPlan, partition_by: list[str] | None = None,
                 add_columns: bool = False) -> None:
    """Append in one Delta commit carrying the batch's idempotency marker (txnAppId = pipeline,
    txnVersion = batch id) and its ranges in userMetadata. Delta skips the write if the table's
    marker is already at or above this batch. ``add_columns``: the plan found new fields, which this
    commit adds to the table's schema (Delta schema evolution)."""
    from tidemark.errors import ConcurrentBatchWriteError

    writer = frame.write.format("delta").mode("append")
    if add_columns:
        writer = writer.option("mergeSchema", "true")
    try:
        (writer.partitionBy(*(partition_by or []))
            .option("txnAppId", plan.pipeline)
            .option("txnVersion", str(plan.batch_id))
            .option("userMetadata", plan.commit_metadata())
            .save(table_uri))
    except Exception as exc:
        if not any(code in str(exc) for code in _CONCURRENT_WRITE_ERRORS):
            raise
        raise ConcurrentBatchWriteError(
            f"batch {plan.batch_id}: another writer committed to {table_uri} while this run wrote the batch (a stale "
            f"driver, or a killed job's last write that the Spark Connect server finished); Delta refused this "
            f"commit, so the batch is there at most once. The next run finds it there and commits the ledger, or "
            f"reads it again.", pipeline=plan.pipeline) from None


_CONCURRENT_WRITE_ERRORS = ("DELTA_CONCURRENT_TRANSACTION", "DELTA_PROTOCOL_CHANGED", "DELTA_METADATA_CHANGED")
"""Delta's refusals of a commit that lost to a concurrent one (the same marker; or both creating the table)."""


def write_dead_letters(rows: DataFrame, plan: BatchPlan) -> None:
    """The batch's bad rows, in one Delta commit of the dead-letter table with the batch's marker."""
    from pyspark.sql import functions as F

    bad = rows.where("error IS NOT NULL").withColumn("pipeline", F.lit(plan.pipeline))
    _append_once(bad.select(*DEAD_LETTER_COLUMNS), plan.dead_letter_uri, plan)


def has_bad_rows(rows: DataFrame) -> bool:
    return bool(rows.where("error IS NOT NULL").limit(1).count())


def write_output(rows: DataFrame, plan: BatchPlan) -> None:
    """The commit point of the batch: its good records, in one Delta commit with the marker."""
    from pyspark.sql import functions as F

    good = rows.where("error IS NULL") if "error" in rows.columns else rows
    if DATE_COLUMN in plan.partition_by:
        good = good.withColumn(DATE_COLUMN, F.to_date(F.col("kafka_timestamp")))
    _append_once(good.select(*output_columns(plan.format, plan.partition_by)), plan.table_uri, plan,
                 plan.partition_by, add_columns=plan.format.add_columns)
