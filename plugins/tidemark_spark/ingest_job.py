"""Tidemark's ingest job: parse arguments -> build the session -> call the core.

    spark-submit --jars <Kafka source, Delta> --py-files <tidemark core> .../tidemark_spark/ingest_job.py \
        --plan '<frozen plan JSON>'

Kafka client properties (which may hold credentials) and the object-store settings come from the
job's settings file (mode 0600, written by the launcher, its path in TIDEMARK_JOB_SETTINGS), never from
the command line; the object store becomes S3A and Delta log store configuration of the job's own
session (``tidemark.batch.job_settings.JobSettings``). The batch protocol itself is
``tidemark.batch.execute.execute_batch``. The job's exit code is a ``tidemark.errors.JobExit``: 0 done,
3 a terminal error (the launchers fail without retries), anything else a failure a retry may fix.

The warm path: with TIDEMARK_SPARK_REMOTE set (a Spark Connect URL, ``sc://host:port/;token=...``,
kept off the command line because it may hold a token), the same script runs under a plain Python
interpreter and talks to a long-running Spark Connect server instead of starting a JVM:

    TIDEMARK_SPARK_REMOTE=sc://127.0.0.1:15002 python .../tidemark_spark/ingest_job.py --plan '<JSON>'

The protocol steps, the markers and the crash points are the same; only the JVM is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys

from tidemark import fault_injection, storage
from tidemark.batch.execute import execute_batch
from tidemark.batch.job_settings import JobSettings
from tidemark.batch.plan import BatchPlan
from tidemark.batch.spark.batch_io import error_chain
from tidemark.errors import JobExit, TidemarkError

log = logging.getLogger("tidemark.ingest")

REMOTE_ENV_VAR = "TIDEMARK_SPARK_REMOTE"
"""The Spark Connect URL of the warm path (unset: the job runs in spark-submit's own JVM)."""
SNAPSHOT_PARTITIONS = "4"
"""The tasks Delta rebuilds a table's state with (``spark.databricks.delta.snapshotPartitions``; Delta's default
is 50, far too many for the small logs of ingestion tables on a small driver: each task generates the same large
encoder again)."""



def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ingest.py", description="Ingest one frozen Tidemark batch.")
    parser.add_argument("--plan", required=True, help="the frozen batch plan (JSON) from the plan task")
    parser.add_argument("--isolation-level", choices=["read_committed", "read_uncommitted"],
                        help="only for a plan frozen before plans carried their isolation level (an upgrade with "
                             "a batch in flight); a plan's own is used otherwise")
    return parser.parse_args(argv)


CONNECT_ENV_VARS = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")
"""Environment variables that turn pyspark's session builder into a Spark Connect client. Under spark-submit the
job runs on its own JVM; the warm path is chosen by the pipeline's Spark connection (TIDEMARK_SPARK_REMOTE), so a
worker whose environment sets these for other work must not send the batch elsewhere (nor fail it: a process that
once opened a Connect session passes SPARK_CONNECT_MODE_ENABLED to every process it starts)."""


def drop_connect_environment(pipeline: str) -> list[str]:
    """Remove :data:`CONNECT_ENV_VARS` from this process's environment, saying so; the names removed."""
    dropped = [name for name in CONNECT_ENV_VARS if os.environ.pop(name, None) is not None]
    for name in dropped:
        log.warning("pipeline '%s': %s is set in the job's environment; ignored, since the job runs under "
                    "spark-submit (a pipeline runs on a Spark Connect server through a Spark connection of type "
                    "spark_connect)", pipeline, name)
    return dropped


def build_session(pipeline: str = "ingest", defaults: dict[str, str] | None = None):
    """The job's session. ``defaults`` (the object-store settings) apply where spark-submit's
    configuration (the pipeline's ``spark_conf``) sets nothing else."""
    drop_connect_environment(pipeline)
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
            .config("spark.databricks.delta.snapshotPartitions", SNAPSHOT_PARTITIONS)
            .getOrCreate())


def connect_session(url: str, pipeline: str):
    """A session on a Spark Connect server. The server fixes the SQL extensions (Delta), the
    catalog and the object-store settings when it starts (scripts/connect.sh); a session can only
    set its runtime options."""
    import warnings

    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")  # pyspark 4.2 on pandas 3
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    from tidemark.connections import spark_connect_address
    from tidemark.errors import SparkConnectUnavailableError

    spark = SparkSession.builder.remote(url).getOrCreate()
    # pyspark retries an unreachable server for at least 10 minutes by default: the first call (which
    # opens the session) gets about 10 s, and the job's own calls the default policies again.
    policies = spark.client.get_retry_policies()
    spark.client.set_retry_policies([DefaultPolicy(max_retries=7, backoff_multiplier=2.0, initial_backoff=100,
                                                   max_backoff=5000)])
    try:
        spark.conf.set("spark.sql.session.timeZone", "UTC")  # the first call to the server
        spark.client.set_retry_policies(policies)
    except Exception as exc:
        with contextlib.suppress(Exception):
            spark.stop()
        details = re.search(r'details = "([^"]*)"', str(exc))  # gRPC's own words, else the exception's
        cause = details.group(1) if details else error_chain(exc)[:300]
        raise SparkConnectUnavailableError(
            f"the Spark Connect server at {spark_connect_address(url)} did not answer ({cause}). Nothing was read or "
            f"written; the batch stays planned. Start it (scripts/connect.sh up) or fix the Spark connection's "
            f"host and port.", pipeline=pipeline) from None
    log.info("pipeline '%s': the job runs on the Spark Connect server at %s", pipeline, spark_connect_address(url))
    return spark


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    plan = BatchPlan.from_json(args.plan)
    if args.isolation_level and "isolation_level" not in json.loads(args.plan):
        plan.isolation_level = args.isolation_level
    try:
        job = JobSettings.from_environment()
        try:
            run_batch(plan, job)
        except OSError as exc:  # delta-rs on object storage: a wrong location is terminal, the rest transient
            raise storage.storage_failure(exc, plan.table_uri, job.store, plan.pipeline) from None
    except TidemarkError as exc:
        exc.with_fields(pipeline=plan.pipeline, batch_id=plan.batch_id, step="ingest")
        log.error("pipeline '%s': batch %d failed, nothing past the last completed step was committed: %s: %s%s",
                  plan.pipeline, plan.batch_id, type(exc).__name__, exc.detail,
                  " (a retry resumes from there)" if exc.transient else " (a retry cannot fix this: fix the cause)")
        return JobExit.RETRYABLE if exc.transient else JobExit.TERMINAL
    except Exception as exc:
        log.error("pipeline '%s': batch %d failed, nothing past the last completed step was committed (a retry "
                  "resumes from there): %s", plan.pipeline, plan.batch_id, error_chain(exc))
        raise
    return JobExit.OK


def run_batch(plan: BatchPlan, job: JobSettings) -> None:
    """Open the session (spark-submit's JVM, or the warm path's server) and execute the batch."""
    remote = os.environ.get(REMOTE_ENV_VAR)
    if remote:
        spark = connect_session(remote, plan.pipeline)
    else:
        on_object_store = any(storage.is_object_store(u) for u in (plan.table_uri, plan.dead_letter_uri,
                                                                   plan.ledger_uri))
        spark = build_session(plan.pipeline, storage.spark_conf(job.store, secrets=True) if on_object_store else None)
    try:
        log_stores = [f"spark.delta.logStore.{scheme}.impl" for scheme in ("s3a", "s3")]
        storage.check_spark_commits({key: spark.conf.get(key, None) for key in log_stores},
                                    [plan.table_uri, plan.dead_letter_uri], f"pipeline '{plan.pipeline}'")
        execute_batch(spark, plan, job.kafka_properties, job.store)
    finally:
        spark.stop()


def run_and_exit() -> None:
    """The job scripts' entry: ``main``, then the process's exit with its code. On the warm path the interpreter's
    own teardown after the batch (gRPC's channel threads, the client's release pool) took 0.3-0.4 s on the slower
    CPU model, about 6 % of a 10,000-record batch, with nothing left to do: the batch is committed, or its failure
    logged, and the session released by then. So there the job flushes its output and logs and leaves at once
    (``os._exit``); under spark-submit, whose JVM owns the process's end, it exits as usual."""
    code = main()
    if os.environ.get(REMOTE_ENV_VAR):
        fault_injection.before_exit()  # what an atexit handler of the crash injection would have done (tests only)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))
    sys.exit(code)


if __name__ == "__main__":
    run_and_exit()
