"""Execute: the Spark part of a batch, given a SparkSession. Reads exactly the frozen ranges,
writes dead letters and the output with the batch's idempotency marker (the output commit is the
commit point), then finalizes. The Spark job (``tidemark_spark.ingest``) only parses its arguments,
builds the session and calls ``execute_batch``; tests call it with their own session.

Two write paths, chosen by the record format:

* values that can be bad (JSON with a schema, size limits): cache, count good and bad records per
  partition and check them against the frozen ranges before anything is written; then dead
  letters, then the output;
* raw values: one pass over Kafka writes the output while Spark counts what it read.

Either way ``finalize_batch`` checks what the tables hold before the ledger commit.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Mapping

from tidemark import crash, spark_io
from tidemark.batch.finalize import Tally, check_read, finalize_batch
from tidemark.batch.plan import BatchPlan
from tidemark.batch.recovery import output_txn_version
from tidemark.errors import (
    BadRecordsError,
    KafkaAuthenticationError,
    KafkaUnavailableError,
    PipelineBusyError,
    PlanMismatchError,
)
from tidemark.ledger import Ledger
from tidemark.offsets import TopicPartition

log = logging.getLogger(__name__)


def check_plan_is_frozen(plan: BatchPlan) -> None:
    """The job only executes what the ledger froze, for the run that owns it: the same batch id,
    exactly its ranges, the same owner."""
    state = Ledger(plan.ledger_uri).state(plan.pipeline)
    if state.pending_batch_id != plan.batch_id or state.pending_ranges != sorted(plan.ranges):
        raise PlanMismatchError(
            f"batch {plan.batch_id} handed to the ingest job is not the ledger's pending batch "
            f"({state.pending_batch_id}); refusing to read a range the ledger did not freeze. "
            f"Re-run the plan task.", pipeline=plan.pipeline)
    if state.pending_owner != plan.run_id:
        raise PipelineBusyError.held_by(
            plan.pipeline, f"batch {plan.batch_id} now belongs to run '{state.pending_owner}', not to this run "
                           f"('{plan.run_id}')", "the ingest job checks ownership before reading")


@contextlib.contextmanager
def kafka_errors(plan: BatchPlan):
    """Spark contacts Kafka lazily (when the read is planned and run): a Kafka failure there becomes
    an error that names the batch and says what happens next."""
    try:
        yield
    except Exception as exc:
        cause = spark_io.kafka_failure(exc)
        if cause is None:
            raise
        if cause.startswith(("SaslAuthenticationException", "AuthenticationException")):
            raise KafkaAuthenticationError(
                f"batch {plan.batch_id}: Kafka refused the credentials of the Kafka connection ({cause}). Nothing "
                f"was written or committed; the batch stays planned and is read again once the connection's "
                f"sasl.jaas.config (or sasl.username / sasl.password) is fixed.", pipeline=plan.pipeline) from None
        ranges = ", ".join(f"{r.tp} [{r.start}, {r.end})" for r in plan.ranges)
        raise KafkaUnavailableError(
            f"batch {plan.batch_id}: Spark could not read {ranges} from Kafka within about "
            f"{plan.kafka_timeout_seconds} s ({cause}). Nothing was written or committed; the batch stays "
            f"planned and the next attempt (an Airflow retry or the next run) reads the same frozen ranges. Check "
            f"the Kafka connection and that the brokers are up.", pipeline=plan.pipeline) from None


def execute_batch(spark, plan: BatchPlan, properties: Mapping[str, str], isolation_level: str = "read_committed"
                  ) -> None:
    """Execute one frozen batch with the given SparkSession and commit it: read exactly its ranges
    from Kafka, write the dead letters and the output (the commit point), then finalize (ledger
    commit). A batch whose marker is already in the output is only finalized. Idempotent."""
    marker = output_txn_version(plan.table_uri, plan.pipeline)
    if marker is not None and marker >= plan.batch_id:
        log.warning("pipeline '%s': batch %d is already in the output table; only the ledger is "
                    "brought up to date", plan.pipeline, plan.batch_id)
        finalize_batch(plan)
    else:
        check_plan_is_frozen(plan)
        log.info("pipeline '%s': batch %d: reading %d offsets of %d partition(s) from Kafka", plan.pipeline,
                 plan.batch_id, plan.total_offsets, len(plan.ranges))
        crash.crash_when_spark_is_busy(crash.DURING_READ, spark)
        raw = spark_io.read_ranges(spark, spark_io.kafka_source_options(plan, properties, isolation_level))
        rows = spark_io.to_rows(raw, plan.format, plan.batch_id, dt.datetime.now(dt.UTC))
        if plan.dedupe:
            rows = spark_io.drop_already_written(spark, rows, plan)
        if plan.format.can_reject or plan.dedupe:
            finalize_batch(plan, tallies=write_counted_first(rows, plan))
        else:
            finalize_batch(plan, records_read=write_in_one_pass(rows, plan))
    crash.crash_point(crash.AFTER_LEDGER_COMMIT)


def write_counted_first(rows, plan: BatchPlan) -> dict[TopicPartition, Tally]:
    """Values that can be bad, and re-reads that are deduplicated (backfills, replays): cache the
    batch, count good and bad records per partition and check them against the frozen ranges before
    anything is written, then write the dead letters and the output (the commit point). A batch left
    with no record (everything already in the output) makes no commit at all, as an empty
    incremental run makes none. Returns the counts for the reconciliation."""
    with kafka_errors(plan):
        rows = rows.persist()
    try:
        with kafka_errors(plan):
            tallies = spark_io.tally(rows)
        check_read(plan, tallies)
        bad = sum(t.bad for t in tallies.values())
        log.info("pipeline '%s': batch %d read %d records (%d bad) from %d offsets", plan.pipeline, plan.batch_id,
                 sum(t.records for t in tallies.values()), bad, plan.total_offsets)
        if not any(t.records for t in tallies.values()):
            log.info("pipeline '%s': batch %d: every record of its ranges is already in the output or the dead "
                     "letters; no table is written", plan.pipeline, plan.batch_id)
            return tallies
        if bad and plan.format.on_bad_record == "fail":
            raise BadRecordsError(
                f"batch {plan.batch_id} has {bad} bad record(s) and on_bad_record is 'fail'; nothing was "
                f"written. First: {'; '.join(spark_io.bad_examples(rows))}. Fix the producer, or set "
                f"'on_bad_record: dead_letter' to divert them to {plan.dead_letter_uri}.", pipeline=plan.pipeline)
        if bad:
            spark_io.write_dead_letters(rows, plan)
            log.info("pipeline '%s': %d dead letters written to %s", plan.pipeline, bad, plan.dead_letter_uri)
        crash.crash_point(crash.AFTER_DEAD_LETTERS)
        spark_io.write_output(rows, plan)
        log.info("pipeline '%s': batch %d committed to %s", plan.pipeline, plan.batch_id, plan.table_uri)
        crash.crash_point(crash.AFTER_OUTPUT_COMMIT)
    finally:
        rows.unpersist()
    return tallies


def write_in_one_pass(rows, plan: BatchPlan) -> int | None:
    """Raw values cannot be bad: one pass over Kafka writes the output (the commit point) while
    Spark counts what it read. The tables are then checked against the frozen ranges and that count
    before the ledger commit (finalize_batch). Returns the count (None if Delta skipped the write:
    the output already held the batch)."""
    crash.crash_point(crash.AFTER_DEAD_LETTERS)  # no dead letters in this format; the point stays reachable
    with kafka_errors(plan):
        records_read = spark_io.write_output_counting(rows, plan)
    if records_read is None:
        log.warning("pipeline '%s': batch %d was already in %s (Delta skipped the write by its marker)",
                    plan.pipeline, plan.batch_id, plan.table_uri)
    else:
        log.info("pipeline '%s': batch %d committed to %s (%d records read from %d offsets)", plan.pipeline,
                 plan.batch_id, plan.table_uri, records_read, plan.total_offsets)
    crash.crash_point(crash.AFTER_OUTPUT_COMMIT)
    return records_read
