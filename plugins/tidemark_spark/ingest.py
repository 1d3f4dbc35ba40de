"""Tidemark's ingest job: parse arguments -> build the session -> call the core.

    spark-submit --jars <Kafka source, Delta> --py-files <tidemark core> .../tidemark_spark/ingest.py \
        --plan '<frozen plan JSON>'

Kafka client properties (which may hold credentials) come from the environment variable
TIDEMARK_KAFKA_PROPERTIES (JSON), never from the command line; so do the object-store settings
(TIDEMARK_STORAGE_OPTIONS), which this job turns into S3A and Delta log store configuration of its
own session. The batch protocol itself is
``tidemark.batch.execute.execute_batch``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from tidemark import storage
from tidemark.batch.execute import execute_batch
from tidemark.batch.plan import BatchPlan
from tidemark.errors import TidemarkError
from tidemark.spark_io import error_chain

log = logging.getLogger("tidemark.ingest")

TERMINAL_EXIT_CODE = 3
"""The job's exit code for a terminal error (``TidemarkError.transient`` false): spark-submit passes
it on, and the Airflow operator fails the task without retries."""


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


def build_session(pipeline: str = "ingest", defaults: dict[str, str] | None = None):
    """The job's session. ``defaults`` (the object-store settings) apply where spark-submit's
    configuration (the pipeline's ``spark_conf``) sets nothing else."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    SparkContext._ensure_initialized()  # connect to spark-submit's JVM, so SparkConf() holds its settings
    given = SparkConf()  # what spark-submit passed (--conf, spark-defaults.conf)
    builder = SparkSession.builder
    for key, value in (defaults or {}).items():
        if not given.contains(key):
            builder = builder.config(key, value)
    return (builder.appName(f"tidemark-{pipeline}")
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
            .config("spark.sql.session.timeZone", "UTC")
            # Delta rebuilds a table's state with this many tasks (default 50): far too many for
            # the small logs of ingestion tables on a small driver.
            .config("spark.databricks.delta.snapshotPartitions", "4")
            .getOrCreate())


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    plan = BatchPlan.from_json(args.plan)
    properties = kafka_properties_from_env()
    tables = [plan.table_uri, plan.dead_letter_uri, plan.ledger_uri]
    try:
        storage.configure_from_env()
        on_object_store = any(storage.is_object_store(uri) for uri in tables)
        spark = build_session(plan.pipeline, storage.spark_conf(storage.configured(), secrets=True)
                              if on_object_store else None)
        try:
            storage.check_spark_commits(
                {key: spark.conf.get(key, None) for scheme in ("s3a", "s3")
                 for key in (f"spark.delta.logStore.{scheme}.impl",)},
                [plan.table_uri, plan.dead_letter_uri], f"pipeline '{plan.pipeline}'")
            execute_batch(spark, plan, properties, args.isolation_level)
        finally:
            spark.stop()
    except TidemarkError as exc:
        log.error("pipeline '%s': batch %d failed, nothing past the last completed step was committed: %s: %s%s",
                  plan.pipeline, plan.batch_id, type(exc).__name__, exc,
                  " (a retry resumes from there)" if exc.transient else " (a retry cannot fix this: fix the cause)")
        if not exc.transient:
            return TERMINAL_EXIT_CODE
        raise
    except Exception as exc:
        log.error("pipeline '%s': batch %d failed, nothing past the last completed step was committed (a retry "
                  "resumes from there): %s", plan.pipeline, plan.batch_id, error_chain(exc))
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
