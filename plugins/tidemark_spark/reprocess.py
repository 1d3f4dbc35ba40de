"""The Spark job of ``tidemark dead-letters reprocess``: parse arguments -> build the session -> decode the
reserved entry's dead letters again, write those that decode to the output once, update the dead-letter
table, commit the ledger entry (the protocol: ``tidemark.operations.reprocessing``).

    spark-submit --jars <Kafka source, Delta> --py-files <tidemark core> .../tidemark_spark/reprocess.py \
        --plan '<reprocess plan JSON>'

It is launched like the ingest job (spark-submit on the pipeline's Spark master, or on the warm path a
client of the Spark Connect server when TIDEMARK_SPARK_REMOTE is set); the object store's settings come
from the same settings file. Exit codes are ``tidemark.errors.JobExit``'s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
from pathlib import Path

from tidemark import fault_injection, storage
from tidemark.batch.job_settings import JobSettings
from tidemark.batch.spark import shaping
from tidemark.batch.spark.batch_io import append_marked, error_chain
from tidemark.errors import JobExit, TidemarkError
from tidemark.formats.record_format import output_columns
from tidemark.formats.records import DATE_COLUMN
from tidemark.operations.reprocessing import ReprocessPlan, finalize, ranges_sql
from tidemark.run import PipelineRun

log = logging.getLogger("tidemark.reprocess")

SCRIPT = str(Path(__file__).resolve())
_KEYS = ["kafka_topic", "kafka_partition", "kafka_offset"]


def decoded(spark, plan: ReprocessPlan):
    """The selected dead letters decoded with the pipeline's format (``tidemark.batch.spark.shaping.to_rows``, as ingest
    decodes): the output's columns and ``error`` (null when the record decodes now). Each row keeps the
    ``ingest_batch_id`` of the batch that read it; ``ingested_at`` is now."""
    from pyspark.sql import functions as F

    dead = spark.read.format("delta").load(plan.dead_letter_uri).where(plan.selection())
    raw = dead.select(F.col("kafka_topic").alias("topic"), F.col("kafka_partition").alias("partition"),
                      F.col("kafka_offset").alias("offset"), F.col("kafka_timestamp").alias("timestamp"),
                      F.col("kafka_key").alias("key"), F.col("kafka_headers").alias("headers"), "value",
                      "ingest_batch_id")
    # to_rows writes its batch id with F.lit, which hands a Column through unchanged: each row keeps its own.
    return shaping.to_rows(raw, plan.format, F.col("ingest_batch_id"), dt.datetime.now(dt.UTC))


def output_keys(spark, plan: ReprocessPlan, store):
    """The Kafka coordinates the output holds within the entry's ranges (None: no output table yet)."""
    if storage.open_table(plan.table_uri, store) is None:
        return None
    return spark.read.format("delta").load(plan.table_uri).where(ranges_sql(plan.ranges)).select(*_KEYS)


def write_output(spark, plan: ReprocessPlan, store) -> None:
    """The dead letters that decode now and that the output does not hold yet, appended in one Delta commit
    with the entry's marker (a second commit of the same entry is skipped by Delta)."""
    from pyspark.sql import functions as F

    fmt = plan.format
    good = decoded(spark, plan).where("error IS NULL")
    existing = output_keys(spark, plan, store)
    if existing is not None:
        good = good.join(existing, on=_KEYS, how="left_anti")
    if good.isEmpty():  # nothing decodes now, or the output holds it all: no commit at all
        return
    if DATE_COLUMN in plan.partition_by:
        good = good.withColumn(DATE_COLUMN, F.to_date(F.col("kafka_timestamp")))
    append_marked(good.select(*output_columns(fmt, plan.partition_by)), plan.table_uri, app_id=plan.app_id,
                  version=plan.entry_id, metadata=plan.commit_metadata(), pipeline=plan.pipeline,
                  partition_by=plan.partition_by, add_columns=fmt.add_columns, widen=fmt.widen,
                  refused=f"reprocess entry {plan.entry_id}: another writer committed to {plan.table_uri} at the same "
                          f"moment and Delta refused this commit; nothing is lost: run the same command again to "
                          f"finish the entry")


def update_dead_letters(spark, plan: ReprocessPlan, store) -> None:
    """One MERGE on the dead-letter table: a selected dead letter the output now holds is deleted; one that
    still does not decode gets its new reason (``error``). Spark says which is which (one small job: the
    selection's coordinates and new reasons); delta-rs merges them, in one commit, without a Spark MERGE's jobs."""
    from pyspark.sql import functions as F

    source = decoded(spark, plan).select(*_KEYS, "error")
    existing = output_keys(spark, plan, store)
    if existing is None:
        source = source.withColumn("in_output", F.lit(False))
    else:
        source = source.join(existing.withColumn("in_output", F.lit(True)), on=_KEYS, how="left").fillna(
            False, subset=["in_output"])
    before = (spark.read.format("delta").load(plan.dead_letter_uri).where(plan.selection())
              .select(*_KEYS, F.col("error").alias("old_error")))
    changes = source.join(before, on=_KEYS).where("in_output OR NOT (error <=> old_error)").drop("old_error").toArrow()
    if not changes.num_rows:  # nothing to delete or to give a new reason: no commit
        return
    quoted = plan.pipeline.replace("'", "''")
    (storage.open_table(plan.dead_letter_uri, store)
     .merge(changes, source_alias="s", target_alias="t",
            predicate=f"t.pipeline = '{quoted}' AND t.kafka_topic = s.kafka_topic AND "
                      f"t.kafka_partition = s.kafka_partition AND t.kafka_offset = s.kafka_offset")
     .when_matched_delete(predicate="s.in_output")
     .when_matched_update(updates={"error": "s.error"},
                          predicate="s.error IS NOT NULL AND (t.error IS NULL OR t.error <> s.error)")
     .execute())


def execute(spark, plan: ReprocessPlan, store=None) -> dict:
    """The entry's three steps, each safe to repeat: output, dead letters, ledger."""
    log.info("pipeline '%s': reprocess entry %d: decoding %d dead letters again", plan.pipeline, plan.entry_id,
             sum(plan.selected.values()))
    write_output(spark, plan, store)
    fault_injection.crash_point(fault_injection.AFTER_OUTPUT_COMMIT)
    update_dead_letters(spark, plan, store)
    fault_injection.crash_point(fault_injection.AFTER_DEAD_LETTERS)
    counts = finalize(plan, store)
    fault_injection.crash_point(fault_injection.AFTER_LEDGER_COMMIT)
    log.info("pipeline '%s': reprocess entry %d committed: %d reprocessed into %s, %d left as dead letters",
             plan.pipeline, plan.entry_id, sum(c for c, _ in counts.values()), plan.table_uri,
             sum(d for _, d in counts.values()))
    return counts


def main(argv: list[str] | None = None) -> int:
    import os

    from tidemark_spark.ingest_job import REMOTE_ENV_VAR, build_session, connect_session

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="reprocess.py", description="Re-ingest a reserved entry's dead letters.")
    parser.add_argument("--plan", required=True, help="the reserved reprocess entry (JSON)")
    plan = ReprocessPlan.from_json(parser.parse_args(sys.argv[1:] if argv is None else argv).plan)
    try:
        job = JobSettings.from_environment()
        remote = os.environ.get(REMOTE_ENV_VAR)
        on_object_store = any(storage.is_object_store(u) for u in (plan.table_uri, plan.dead_letter_uri))
        spark = (connect_session(remote, plan.pipeline) if remote else build_session(
            plan.pipeline, storage.spark_conf(job.store, secrets=True) if on_object_store else None))
        try:
            log_stores = [f"spark.delta.logStore.{scheme}.impl" for scheme in ("s3a", "s3")]
            storage.check_spark_commits({key: spark.conf.get(key, None) for key in log_stores},
                                        [plan.table_uri, plan.dead_letter_uri], f"pipeline '{plan.pipeline}'")
            execute(spark, plan, job.store)
        finally:
            spark.stop()
    except TidemarkError as exc:
        log.error("pipeline '%s': reprocess entry %d failed (running the command again finishes it): %s: %s",
                  plan.pipeline, plan.entry_id, type(exc).__name__, exc.detail)
        return JobExit.RETRYABLE if exc.transient else JobExit.TERMINAL
    except Exception as exc:
        log.error("pipeline '%s': reprocess entry %d failed (running the command again finishes it): %s",
                  plan.pipeline, plan.entry_id, error_chain(exc))
        raise
    return JobExit.OK


def launch(run: PipelineRun, plan: ReprocessPlan) -> int:
    """Run the job on the pipeline's Spark master, as ``tidemark run`` runs the ingest job: spark-submit in
    client mode, or a client of the Spark Connect server. Returns its exit code (``JobExit``)."""
    from tidemark_spark.submit import launch_job

    return launch_job(run, SCRIPT, ["--plan", plan.to_json()], f"tidemark-reprocess-{plan.pipeline}")


if __name__ == "__main__":
    sys.exit(main())
