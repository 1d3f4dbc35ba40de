"""The Spark side of a batch: read exactly the frozen ranges, shape the output rows, write them
with the batch's idempotency marker. Functions take the SparkSession; pyspark is imported lazily
so the rest of the core never needs a JVM."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple

from tidemark.batch.plan import BatchPlan
from tidemark.batch.tables import Tally
from tidemark.formats.record_format import output_columns
from tidemark.formats.records import DATE_COLUMN, DEAD_LETTER_COLUMNS
from tidemark.kafka.client import java_client_properties
from tidemark.kafka.offsets import TopicPartition, spark_kafka_options, spark_min_partitions

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


class JvmFailure(NamedTuple):
    """What a failure raised through py4j or Spark Connect was, on the JVM side."""

    kind: Literal["kafka_auth", "kafka", "bad_record", "key_moved", "concurrent_write", "concurrent_rewrite",
                  "missing_bucket"]
    cause: str
    """The Java error's class and first message line (never the stack): what the user reads."""


_KAFKA_AUTH_ERRORS = ("SaslAuthenticationException", "AuthenticationException", "SslAuthenticationException")


def jvm_failure(exc: BaseException) -> JvmFailure | None:
    """The one place where Tidemark reads an error's text to decide what it was: a JVM exception
    reaches Python only as text (py4j and Spark Connect carry the Java class in the message, not as a
    type). Returns None for anything not listed here, which then propagates unchanged."""
    text = str(exc)
    if BAD_RECORD_MARK in text:
        line = text[text.index(BAD_RECORD_MARK):].splitlines()[0]
        return JvmFailure("bad_record", line.removeprefix(BAD_RECORD_MARK).strip())
    if KEY_MOVED_MARK in text:
        moved = text[text.index(KEY_MOVED_MARK) + len(KEY_MOVED_MARK):]
        return JvmFailure("key_moved", moved[:moved.index(KEY_MOVED_END)].strip() if KEY_MOVED_END in moved else moved)
    for code in _CONCURRENT_WRITE_ERRORS:
        if code in text:
            return JvmFailure("concurrent_write", code)
    for code in _CONCURRENT_REWRITE_ERRORS:
        if code in text:
            return JvmFailure("concurrent_rewrite", code)
    match = re.search(r"org\.apache\.kafka\.common\.errors\.(\w+): ([^\n]*)", text)
    if match:
        cause = f"{match.group(1)}: {match.group(2).strip()}"
        if match.group(1) not in _KAFKA_AUTH_ERRORS:
            return JvmFailure("kafka", cause)
        from tidemark.kafka.tls import handshake_failure  # a TLS handshake's cause lies deeper in the chain

        return JvmFailure("kafka_auth", handshake_failure(text) or cause)
    match = re.search(r"org\.apache\.hadoop\.fs\.s3a\.UnknownStoreException: ([^\n]*)", text)
    if match:
        return JvmFailure("missing_bucket", f"UnknownStoreException: {match.group(1).strip()}")
    return None


V1_SOURCES = "spark.sql.sources.useV1SourceList"
OPTIONS_REDACTION = "spark.sql.redaction.options.regex"
SECRET_OPTIONS = "(?i)url|jaas|password|secret|token|keystore|truststore|ssl[.]key"
"""Reader options whose name (or value) matches are shown as ``*********(redacted)`` in plan
descriptions, the UI and the event log: credentials (``kafka.sasl.jaas.config``, passwords) and TLS
material (``kafka.ssl.keystore.key``, certificates, store locations)."""


def redact_reader_options(spark: SparkSession) -> None:
    """Make the session redact :data:`SECRET_OPTIONS` in plan descriptions, keeping whatever the
    session already redacts. Set on the session, not at launch, so it also holds on a Spark Connect
    server Tidemark did not start."""
    current = spark.conf.get(OPTIONS_REDACTION)  # no default argument: it would hide Spark's own
    if SECRET_OPTIONS not in current:
        spark.conf.set(OPTIONS_REDACTION, f"{current}|{SECRET_OPTIONS}" if current else SECRET_OPTIONS)


def read_ranges(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    """A bounded batch read of the Kafka source with the given options (``tidemark.batch.spark.shaping.to_rows``
    shapes its rows), through the source's DataSource V2 scan, the reader Structured Streaming uses.
    Spark's default sends a batch read of Kafka to its V1 relation, which turns every record into a
    JVM ``Row`` and back: in one JVM a 2M-record read took 0.81x the time through V2, a read and Delta
    append 0.90x (``make bench-read-path``, docs/BENCHMARKS.md)."""
    redact_reader_options(spark)  # the V2 scan prints its options in the plan
    sources = spark.conf.get(V1_SOURCES).split(",")  # no default argument: it would hide Spark's own
    if "kafka" in (s.strip().lower() for s in sources):
        spark.conf.set(V1_SOURCES, ",".join(s for s in sources if s.strip().lower() != "kafka"))
    return spark.read.format("kafka").options(**options).load()


def drop_already_written(spark: SparkSession, rows: DataFrame, plan: BatchPlan, store=None) -> DataFrame:
    """Remove records whose Kafka coordinates the output or dead-letter table already holds
    (re-reads after a reset back in time, backfills). Only the batch's ranges are looked up.
    ``store``: the object store of tables on S3 (for delta-rs' look at whether they exist)."""
    from pyspark.sql import functions as F

    from tidemark import storage

    within = None
    for r in plan.ranges:
        cond = ((F.col("kafka_topic") == r.topic) & (F.col("kafka_partition") == r.partition)
                & F.col("kafka_offset").between(r.start, r.end - 1))
        within = cond if within is None else within | cond
    keys = ["kafka_topic", "kafka_partition", "kafka_offset"]
    for uri in (plan.table_uri, plan.dead_letter_uri):
        if uri and storage.open_table(uri, store) is not None:  # delta-rs: works with a Spark Connect session too
            existing = spark.read.format("delta").load(uri).where(within).select(*keys)
            rows = rows.join(existing, on=keys, how="left_anti")
    return rows


def write_observed(rows: DataFrame, plan: BatchPlan, *aggregates: Column, wait_s: float = 10.0) -> dict | None:
    """Write the output in one pass over Kafka while Spark computes ``aggregates`` over the rows it
    reads (an ``Observation`` of the same job). Returns their values, or None when Delta skipped the
    write because the output already holds the batch (its marker): then no job ran to observe."""
    from pyspark.sql import Observation

    observation = Observation(f"tidemark-{plan.pipeline}-{plan.batch_id}")
    write_output(rows.observe(observation, *aggregates), plan)
    return observed_metrics(observation, wait_s)


def observed_metrics(observation, wait_s: float = 10.0) -> dict | None:
    """The values of an ``Observation`` after the action that computed them, or None when no job computed them
    (Delta skipped a write: ``get`` would then block for ever), or when they came back as an empty row (seen after a
    keyed batch's pass whose every change was filtered out before its shuffle)."""
    import time

    if not hasattr(observation, "_jo"):  # Spark Connect: the metrics came back with the action's reply
        return dict(observation.get) or None  # none at all: no job ran
    deadline = time.monotonic() + wait_s
    while not observation._jo.future().isCompleted():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)
    if observation._jo.getRow().length() == 0:  # an empty row, without even a schema to convert it with
        return None
    return dict(observation.get)


def write_output_counting(rows: DataFrame, plan: BatchPlan) -> int | None:
    """Write the output in one pass while Spark counts the records it read (None: Delta skipped it)."""
    from pyspark.sql import functions as F

    observed = write_observed(rows, plan, F.count(F.lit(1)).alias("records"))
    return None if observed is None else int(observed["records"])


BAD_RECORD_MARK = "TIDEMARK-BAD-RECORD"
"""Starts the message of the error a bad record raises inside the write under ``on_bad_record: fail``."""
KEY_MOVED_MARK, KEY_MOVED_END = "TIDEMARK-KEY-MOVED", "TIDEMARK-END"
"""Frame the message a keyed MERGE raises when a change's key has its row from another partition
(``tidemark.batch.spark.merge``): the two partitions, then the key as JSON."""


def fail_on_bad_records(rows: DataFrame) -> DataFrame:
    """The rows, made to fail the Spark job at the first bad record it meets (``raise_error`` in a
    task: the job fails and Delta commits nothing), naming its coordinates and why."""
    from pyspark.sql import functions as F

    message = F.concat(F.lit(f"{BAD_RECORD_MARK} "), F.col("kafka_topic"), F.lit(":"),
                       F.col("kafka_partition").cast("string"), F.lit("@"), F.col("kafka_offset").cast("string"),
                       F.lit(": "), F.col("error"))
    return rows.where(F.coalesce(F.when(F.col("error").isNotNull(), F.raise_error(message)), F.lit(True)))


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
                 add_columns: bool = False, widen: Mapping[str, str] | None = None) -> None:
    """Append in one Delta commit carrying the batch's idempotency marker (txnAppId = pipeline,
    txnVersion = batch id) and its ranges in userMetadata. Delta skips the write if the table's
    marker is already at or above this batch. ``add_columns``: the plan found new fields, which this
    commit adds to the table's schema (Delta schema evolution); ``widen``: columns this commit widens."""
    append_marked(frame, table_uri, app_id=plan.pipeline, version=plan.batch_id, metadata=plan.commit_metadata(),
                  pipeline=plan.pipeline, partition_by=partition_by, add_columns=add_columns, widen=widen,
                  refused=f"batch {plan.batch_id}: another writer committed to {table_uri} while this run wrote the "
                          f"batch (a stale driver, or a killed job's last write that the Spark Connect server "
                          f"finished); Delta refused this commit, so the batch is there at most once. The next run "
                          f"finds it there and commits the ledger, or reads it again.")


def _widened(session, table_uri: str, widen: Mapping[str, str]) -> DataFrame:
    from pyspark.sql import functions as F

    existing = session.read.format("delta").load(table_uri)
    return existing.select(*[F.col(c).cast(widen[c]).alias(c) if c in widen else F.col(c) for c in existing.columns])


def with_widened_table(frame: DataFrame, table_uri: str, widen: Mapping[str, str]) -> DataFrame:
    """The table's rows with the ``widen`` columns cast to their wider types, followed by ``frame``: what
    the table holds after a commit that widens those columns. Every old value is exact in its new type
    (``tidemark.formats.type_changes.is_widening``); a column either side lacks is null in the other's rows."""
    return _widened(frame.sparkSession, table_uri, widen).unionByName(frame, allowMissingColumns=True)


def widen_in_place(spark, table_uri: str, widen: Mapping[str, str], partition_by: list[str] | None,
                   metadata: str) -> list[str]:
    """Widen the table's ``widen`` columns that are not at their type yet, in one overwrite commit with
    ``metadata`` and no marker (a keyed table's, before its MERGE); the columns it widened."""
    from tidemark.formats.type_changes import normalize_type

    held = {f.name: normalize_type(f.dataType.simpleString())
            for f in spark.read.format("delta").load(table_uri).schema.fields}
    todo = {c: t for c, t in widen.items() if c in held and held[c] != normalize_type(t)}
    if todo:
        (_widened(spark, table_uri, todo).write.format("delta").mode("overwrite").option("overwriteSchema", "true")
         .partitionBy(*(partition_by or [])).option("userMetadata", metadata).save(table_uri))
    return sorted(todo)


def append_marked(frame: DataFrame, table_uri: str, *, app_id: str, version: int, metadata: str, pipeline: str,
                  refused: str, partition_by: list[str] | None = None, add_columns: bool = False,
                  widen: Mapping[str, str] | None = None) -> None:
    """Append ``frame`` in one Delta commit carrying the idempotency marker (txnAppId ``app_id``, txnVersion
    ``version``; Delta skips the write when the table's marker is at or above it) and ``metadata`` as its
    userMetadata. A commit Delta refuses because a concurrent one won raises ConcurrentBatchWriteError with
    ``refused`` as its message (transient).

    ``widen`` (column -> wider type) makes the commit rewrite the table with those columns widened and the
    frame's rows added (``with_widened_table``): one commit, under the same marker, so a crash leaves the
    table either as it was or widened with the batch in it. Delta's own type widening (the ``typeWidening``
    table feature) would change no file, but delta-rs, which reads the table for recovery and the audit
    (and for many users' readers), cannot read a table with that feature (docs/DESIGN.md)."""
    from tidemark.errors import ConcurrentBatchWriteError

    if widen:
        writer = (with_widened_table(frame, table_uri, widen).write.format("delta").mode("overwrite")
                  .option("overwriteSchema", "true"))
    else:
        writer = frame.write.format("delta").mode("append")
    if add_columns and not widen:
        writer = writer.option("mergeSchema", "true")
    try:
        (writer.partitionBy(*(partition_by or []))
            .option("txnAppId", app_id)
            .option("txnVersion", str(version))
            .option("userMetadata", metadata)
            .save(table_uri))
    except Exception as exc:
        failure = jvm_failure(exc)
        if failure is None or failure.kind != "concurrent_write":
            raise
        raise ConcurrentBatchWriteError(refused, pipeline=pipeline) from None


_CONCURRENT_WRITE_ERRORS = ("DELTA_CONCURRENT_TRANSACTION", "DELTA_PROTOCOL_CHANGED", "DELTA_METADATA_CHANGED")
"""Delta's refusals of a commit that lost to a concurrent one (the same marker; or both creating the table)."""
_CONCURRENT_REWRITE_ERRORS = ("DELTA_CONCURRENT_DELETE_READ", "DELTA_CONCURRENT_DELETE_DELETE",
                              "DELTA_CONCURRENT_APPEND")
"""Delta's refusals of a MERGE whose files a concurrent commit removed or added to (an OPTIMIZE, say): run on the
table's new version, the MERGE commits."""


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
                 plan.partition_by, add_columns=plan.format.add_columns, widen=plan.format.widen)
