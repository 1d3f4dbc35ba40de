"""Tidemark's ingest job: parse arguments -> build the session -> call the core's functions.

    spark-submit --jars <Kafka source, Delta> spark_jobs/ingest.py --plan '<frozen plan JSON>'

Kafka client properties (which may hold credentials) come from the environment variable
TIDEMARK_KAFKA_PROPERTIES (JSON), never from the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import sys

from tidemark import faults
from tidemark.commit import BatchPlan, Tally, check_read, finalize_batch, output_txn_version
from tidemark.errors import BadRecordsError, KafkaUnavailableError, PipelineBusyError, PlanMismatchError
from tidemark.ledger import Ledger
from tidemark.offsets import TopicPartition

log = logging.getLogger("tidemark.ingest")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ingest.py", description="Ingest one frozen Tidemark batch.")
    parser.add_argument("--plan", required=True, help="the frozen batch plan (JSON) from the plan task")
    parser.add_argument("--isolation-level", default="read_committed",
                        choices=["read_committed", "read_uncommitted"])
    return parser.parse_args(argv)


def kafka_properties_from_env() -> dict[str, str]:
    raw = os.environ.get("TIDEMARK_KAFKA_PROPERTIES")
    if not raw:
        raise SystemExit("TIDEMARK_KAFKA_PROPERTIES is not set: the Kafka client properties (JSON) "
                         "must be passed in the environment")
    return json.loads(raw)


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
        raise PipelineBusyError(
            f"another run holds the pipeline: batch {plan.batch_id} now belongs to run '{state.pending_owner}', "
            f"not to this run ('{plan.run_id}'). This job wrote nothing.", pipeline=plan.pipeline)


def build_session(pipeline: str = "ingest"):
    from pyspark.sql import SparkSession

    return (SparkSession.builder.appName(f"tidemark-{pipeline}")
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
            .config("spark.sql.session.timeZone", "UTC")
            # Delta rebuilds a table's state with this many tasks (default 50): far too many for
            # the small logs of ingestion tables on a small driver.
            .config("spark.databricks.delta.snapshotPartitions", "4")
            .getOrCreate())


@contextlib.contextmanager
def kafka_errors(plan: BatchPlan):
    """Spark contacts Kafka lazily (when the read is planned and run): a Kafka failure there becomes
    an error that names the batch and says what happens next."""
    from tidemark import spark_io

    try:
        yield
    except Exception as exc:
        cause = spark_io.kafka_failure(exc)
        if cause is None:
            raise
        if cause.startswith(("SaslAuthenticationException", "AuthenticationException")):
            from tidemark.errors import KafkaAuthenticationError

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


def run(spark, plan: BatchPlan, properties: dict[str, str], isolation_level: str) -> None:
    from tidemark import spark_io

    marker = output_txn_version(plan.table_uri, plan.pipeline)
    if marker is not None and marker >= plan.batch_id:
        log.warning("pipeline '%s': batch %d is already in the output table; only the ledger is "
                    "brought up to date", plan.pipeline, plan.batch_id)
        finalize_batch(plan)
    else:
        check_plan_is_frozen(plan)
        log.info("pipeline '%s': batch %d: reading %d offsets of %d partition(s) from Kafka", plan.pipeline,
                 plan.batch_id, plan.total_offsets, len(plan.ranges))
        faults.crash_when_spark_is_busy(faults.DURING_READ, spark)
        raw = spark_io.read_ranges(spark, spark_io.kafka_source_options(plan, properties, isolation_level))
        rows = spark_io.to_rows(raw, plan.format, plan.batch_id, dt.datetime.now(dt.UTC))
        if plan.dedupe:
            rows = spark_io.drop_already_written(spark, rows, plan)
        if plan.format.can_reject:
            finalize_batch(plan, tallies=write_counted_first(rows, plan))
        else:
            finalize_batch(plan, records_read=write_in_one_pass(rows, plan))
    faults.crash_point(faults.AFTER_LEDGER_COMMIT)


def write_counted_first(rows, plan: BatchPlan) -> dict[TopicPartition, Tally]:
    """Values that can be bad: cache the batch, count good and bad records per partition and check
    them against the frozen ranges before anything is written, then write the dead letters and
    the output (the commit point). Returns the counts for the reconciliation."""
    from tidemark import spark_io

    with kafka_errors(plan):
        rows = rows.persist()
    try:
        with kafka_errors(plan):
            tallies = spark_io.tally(rows)
        check_read(plan, tallies)
        bad = sum(t.bad for t in tallies.values())
        log.info("pipeline '%s': batch %d read %d records (%d bad) from %d offsets", plan.pipeline, plan.batch_id,
                 sum(t.records for t in tallies.values()), bad, plan.total_offsets)
        if bad and plan.format.on_bad_record == "fail":
            raise BadRecordsError(
                f"batch {plan.batch_id} has {bad} bad record(s) and on_bad_record is 'fail'; nothing was "
                f"written. First: {'; '.join(spark_io.bad_examples(rows))}. Fix the producer, or set "
                f"'on_bad_record: dead_letter' to divert them to {plan.dead_letter_uri}.", pipeline=plan.pipeline)
        if bad:
            spark_io.write_dead_letters(rows, plan)
            log.info("pipeline '%s': %d dead letters written to %s", plan.pipeline, bad, plan.dead_letter_uri)
        faults.crash_point(faults.AFTER_DEAD_LETTERS)
        spark_io.write_output(rows, plan)
        log.info("pipeline '%s': batch %d committed to %s", plan.pipeline, plan.batch_id, plan.table_uri)
        faults.crash_point(faults.AFTER_OUTPUT_COMMIT)
    finally:
        rows.unpersist()
    return tallies


def write_in_one_pass(rows, plan: BatchPlan) -> int | None:
    """Raw values cannot be bad: one pass over Kafka writes the output (the commit point) while
    Spark counts what it read. The tables are then checked against the frozen ranges and that count
    before the ledger commit (finalize_batch). Returns the count (None if Delta skipped the write:
    the output already held the batch)."""
    from tidemark import spark_io

    faults.crash_point(faults.AFTER_DEAD_LETTERS)  # no dead letters in this format; the point stays reachable
    with kafka_errors(plan):
        records_read = spark_io.write_output_counting(rows, plan)
    if records_read is None:
        log.warning("pipeline '%s': batch %d was already in %s (Delta skipped the write by its marker)",
                    plan.pipeline, plan.batch_id, plan.table_uri)
    else:
        log.info("pipeline '%s': batch %d committed to %s (%d records read from %d offsets)", plan.pipeline,
                 plan.batch_id, plan.table_uri, records_read, plan.total_offsets)
    faults.crash_point(faults.AFTER_OUTPUT_COMMIT)
    return records_read


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    plan = BatchPlan.from_json(args.plan)
    properties = kafka_properties_from_env()
    try:
        spark = build_session(plan.pipeline)
        try:
            run(spark, plan, properties, args.isolation_level)
        finally:
            spark.stop()
    except Exception as exc:
        from tidemark.spark_io import error_chain

        log.error("pipeline '%s': batch %d failed, nothing past the last completed step was committed (a retry "
                  "resumes from there): %s", plan.pipeline, plan.batch_id, error_chain(exc))
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
