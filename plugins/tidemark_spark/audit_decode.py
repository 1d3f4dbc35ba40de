"""The Spark job of ``tidemark audit --verify-sample`` for a typed pipeline: read the sampled ranges from Kafka
with exactly their offsets (as ingest reads a batch), decode them with ``tidemark.batch.spark.shaping.to_rows`` and each
batch's format, and compare them record by record with the output and dead-letter tables (what is compared:
``tidemark.audit.typed_sample``).

    spark-submit --jars <Kafka source, Delta> --py-files <tidemark core> .../tidemark_spark/audit_decode.py \
        --check '<ValueCheck JSON>' --result /path/of/answer.json

Launched like ``tidemark dead-letters reprocess`` (``launch``: spark-submit in client mode on the pipeline's
Spark master, or a client of the Spark Connect server); Kafka properties and the object store come from the
run's settings file, never the command line. ``compare`` is the work itself, for any SparkSession; on a keyed
table (a check with ``sample_keys``) the work is ``tidemark_spark.audit_keys.compare_keys`` instead
(``answer_check`` picks).

Each record becomes one row per side: its place (output or dead letters) and an array with one 64-bit hash
per compared column (``xxhash64`` of the column's JSON, so a long and an int of the same value agree, and a
struct's null fields count as absent). Both sides are grouped together by (range, offset), one shuffle and no
join, into one row per record (``per_record``); one aggregation gives each range's counts, and only when
something differs does a second job (reading both sides again: nothing is cached, so a large sample never
holds executor memory) fetch the first ``detail_limit`` differing records of each range, whose arrays say which
columns differ.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tidemark import storage
from tidemark.audit.typed_sample import DEAD, DEAD_LETTER_COMPARED, META_COLUMNS, OUTPUT, ValueCheck, describe
from tidemark.batch.schemas import table_columns
from tidemark.batch.spark import shaping
from tidemark.batch.spark.batch_io import error_chain, kafka_source_options, read_ranges
from tidemark.errors import JobExit, TidemarkError
from tidemark_spark.audit_keys import compare_keys
from tidemark_spark.column_hashes import hashes, to_table_types

log = logging.getLogger("tidemark.audit.live_table")

SCRIPT = str(Path(__file__).resolve())
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_STDERR = 2
"""The job's output goes to this process's standard error (the descriptor: ``sys.stderr`` may be a wrapper
without one, under Airflow): standard output is the audit's report (``--json``)."""


class SampleJobError(TidemarkError):
    """The Spark job of the audit's value comparison failed; nothing was written anywhere."""

    transient = True


def _within(check: ValueCheck, indexes: list[int] | None = None):
    """Rows inside the given sampled ranges (all when None): a filter Delta skips files with."""
    from pyspark.sql import functions as F

    condition = None
    for i in range(len(check.ranges)) if indexes is None else indexes:
        r = check.ranges[i]
        one = ((F.col("kafka_topic") == r["topic"]) & (F.col("kafka_partition") == r["partition"])
               & F.col("kafka_offset").between(r["start"], r["end"] - 1))
        condition = one if condition is None else condition | one
    return condition


def _reprocessed(check: ValueCheck):
    from pyspark.sql import functions as F

    condition = F.lit(False)
    for r in check.reprocessed:
        condition = condition | ((F.col("kafka_topic") == r["topic"]) & (F.col("kafka_partition") == r["partition"])
                                 & F.col("kafka_offset").between(r["start"], r["end"] - 1))
    return condition


def kafka_side(spark, check: ValueCheck, properties: Mapping[str, str], output_compared: list[str],
               table: Mapping[str, str]):
    """The sampled records as ingest decodes them: range, offset, place, hashes, and whether a reprocess
    entry covered the offset. ``table``: the output's column types."""
    from pyspark.sql import functions as F

    sides = None
    for indexes in check.reads():
        plan = check.read_plan(indexes)
        fmt = check.format_of(plan.batch_id)
        rows = shaping.to_rows(read_ranges(spark, kafka_source_options(plan, properties, check.isolation_level)),
                                     fmt, plan.batch_id, _EPOCH)
        index = None
        for i in indexes:
            r = check.ranges[i]
            hit = (F.col("kafka_topic") == r["topic"]) & (F.col("kafka_partition") == r["partition"])
            index = F.when(hit, F.lit(i)) if index is None else index.when(hit, F.lit(i))
        good = F.col("error").isNull()
        present = set(rows.columns)
        side = rows.select(index.alias("_range"), "kafka_offset",
                           F.when(good, F.lit(OUTPUT)).otherwise(F.lit(DEAD)).alias("_where"),
                           F.when(good, hashes(output_compared, present, to_table_types(rows, table)))
                           .otherwise(hashes(list(DEAD_LETTER_COMPARED), present)).alias("_cols"),
                           _reprocessed(check).alias("_reprocessed"))
        sides = side if sides is None else sides.unionByName(side)
    return sides


def table_side(spark, check: ValueCheck, output_compared: list[str], store=None):
    """What the output and the pipeline's dead letters hold at the sampled coordinates (a row inside two
    overlapping sampled ranges counts in each); None when neither table exists."""
    from pyspark.sql import functions as F

    sides = None
    for uri, place, compared in ((check.table_uri, OUTPUT, output_compared),
                                 (check.dead_letter_uri, DEAD, list(DEAD_LETTER_COMPARED))):
        if storage.open_table(uri, store) is None:
            continue
        held = spark.read.format("delta").load(uri).where(_within(check))
        if place == DEAD:
            held = held.where(F.col("pipeline") == check.pipeline)
        ranges = F.array_compact(F.array(*[F.when(_within(check, [i]), F.lit(i)) for i in range(len(check.ranges))]))
        side = held.select(F.explode(ranges).alias("_range"), "kafka_offset", F.lit(place).alias("_where"),
                           hashes(compared, set(held.columns)).alias("_cols"), F.lit(False).alias("_reprocessed"))
        sides = side if sides is None else sides.unionByName(side)
    return sides


def per_record(spark, check: ValueCheck, properties: Mapping[str, str], table: Mapping[str, str], store=None):
    """One row per sampled coordinate: how many records Kafka has there (0 or 1) and the tables hold, where
    and with which hashes, and whether they differ (``differs``, ``values_differ``). One shuffle: both sides
    are grouped together, not joined."""
    from pyspark.sql import functions as F

    compared = check.compared_columns(table)
    sides = kafka_side(spark, check, properties, compared, table).withColumn("_kafka", F.lit(True))
    held = table_side(spark, check, compared, store)
    if held is not None:
        sides = sides.unionByName(held.withColumn("_kafka", F.lit(False)))
    in_kafka, in_tables = F.col("_kafka"), ~F.col("_kafka")
    got = sides.groupBy("_range", "kafka_offset").agg(
        F.count_if(in_kafka).alias("k_n"), F.count_if(in_tables).alias("t_n"),
        F.max(F.when(in_kafka, F.struct("_where", "_cols", "_reprocessed"))).alias("k"),
        F.max(F.when(in_tables, F.struct("_where", "_cols"))).alias("t"))
    one_each = (F.col("k_n") == 1) & (F.col("t_n") == 1)
    same_place = F.col("k._where") == F.col("t._where")
    values_differ = one_each & same_place & (F.col("k._cols") != F.col("t._cols"))
    meta = len(META_COLUMNS)
    reingested = ((F.col("k._where") == DEAD) & (F.col("t._where") == OUTPUT) & F.col("k._reprocessed")
                  & (F.slice("k._cols", 1, meta) == F.slice("t._cols", 1, meta)))
    differs = ~one_each | values_differ | (~same_place & ~reingested)
    return got.select("_range", F.col("kafka_offset").alias("offset"), "k_n", "t_n",
                      F.col("k._where").alias("k_where"), F.col("t._where").alias("t_where"),
                      F.col("k._cols").alias("k_cols"), F.col("t._cols").alias("t_cols"),
                      F.col("k._reprocessed").alias("reprocessed"), differs.alias("differs"),
                      values_differ.alias("values_differ"))


def compare(spark, check: ValueCheck, properties: Mapping[str, str], store=None) -> list[dict]:
    """Per sampled range (in ``check.ranges`` order): ``kafka_records``, ``table_records``, ``differing``
    (records that differ in place or value, that one side lacks, or that the tables hold more than once),
    ``values_differ`` (of those, records in the same place whose compared columns differ) and ``differences``
    (the first ``detail_limit``, by offset)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    table = table_columns(check.table_uri, store) or {}
    compared = check.compared_columns(table)
    rows = per_record(spark, check, properties, table, store)
    counts = {r["_range"]: r for r in rows.groupBy("_range").agg(
        F.sum("k_n").alias("kafka_records"), F.sum("t_n").alias("table_records"),
        F.count_if("differs").alias("differing"), F.count_if("values_differ").alias("values_differ")).collect()}
    answer = [{key: int(counts[i][key]) if i in counts else 0
               for key in ("kafka_records", "table_records", "differing", "values_differ")}
              for i in range(len(check.ranges))]
    for a in answer:
        a["differences"] = []
    if any(a["differing"] for a in answer):  # rare: Kafka and the tables are read a second time
        first = Window.partitionBy("_range").orderBy("offset")
        for r in (rows.where("differs").withColumn("_n", F.row_number().over(first))
                  .where(F.col("_n") <= check.detail_limit).orderBy("_range", "offset").collect()):
            answer[r["_range"]]["differences"].append(_difference(r, compared))
    return answer


def _difference(r, compared: list[str]) -> dict:
    """One differing record (a row of ``per_record``) for people: which compared columns differ."""
    names = (list(META_COLUMNS) if r["k_where"] != r["t_where"] else
             compared if r["k_where"] == OUTPUT else list(DEAD_LETTER_COMPARED))
    columns = ([] if r["k_cols"] is None or r["t_cols"] is None else
               [n for n, a, b in zip(names, r["k_cols"], r["t_cols"], strict=False) if a != b])
    return describe(int(r["offset"]), r["k_where"], r["t_where"], columns, bool(r["reprocessed"]), int(r["t_n"]))


def answer_check(spark, check: ValueCheck, properties: Mapping[str, str], store=None) -> list[dict] | dict:
    """The job's answer: a keyed table's sampled keys (``check.sample_keys``:
    ``tidemark_spark.audit_keys.compare_keys``), or the sampled ranges compared record by record (``compare``)."""
    return (compare_keys if check.keyed or check.sample_keys else compare)(spark, check, properties, store)


def main(argv: list[str] | None = None) -> int:
    from tidemark.batch.job_settings import JobSettings
    from tidemark_spark.ingest_job import REMOTE_ENV_VAR, build_session, connect_session

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="audit_decode.py", description="Compare sampled ranges with Kafka.")
    parser.add_argument("--check", required=True, help="the sampled ranges and their formats (JSON)")
    parser.add_argument("--result", required=True, help="where to write the answer (JSON)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    check = ValueCheck.from_json(args.check)
    try:
        job = JobSettings.from_environment()
        remote = os.environ.get(REMOTE_ENV_VAR)
        on_object_store = any(storage.is_object_store(u) for u in (check.table_uri, check.dead_letter_uri))
        spark = (connect_session(remote, check.pipeline) if remote else build_session(
            f"audit-{check.pipeline}", storage.spark_conf(job.store, secrets=True) if on_object_store else None))
        if not remote:
            spark.sparkContext.setLogLevel("WARN")  # an audit's job log: its warnings and errors, not every task
        try:
            answer = answer_check(spark, check, job.kafka_properties, job.store)
        finally:
            spark.stop()
        Path(args.result).write_text(json.dumps(answer))
    except TidemarkError as exc:
        log.error("pipeline '%s': the audit's sample could not be compared: %s: %s", check.pipeline,
                  type(exc).__name__, exc.detail)
        return JobExit.RETRYABLE if exc.transient else JobExit.TERMINAL
    except Exception as exc:
        log.error("pipeline '%s': the audit's sample could not be compared: %s", check.pipeline, error_chain(exc))
        raise
    return JobExit.OK


def launch(run, check: ValueCheck) -> list[dict] | dict:
    """Run the job on the pipeline's Spark master (``run``: a ``tidemark.run.PipelineRun``), as ``tidemark
    dead-letters reprocess`` runs its job, and return its answer. Raises SampleJobError when it fails."""
    from tidemark_spark.submit import launch_job

    with tempfile.TemporaryDirectory(prefix="tidemark-audit-") as folder:
        result = Path(folder) / "answer.json"
        sys.stdout.flush()
        code = launch_job(run, SCRIPT, ["--check", check.to_json(), "--result", str(result)],
                          f"tidemark-audit-{check.pipeline}", stdout=_STDERR)
        if code != JobExit.OK or not result.is_file():
            error = SampleJobError(f"the Spark job comparing the audit's sample with Kafka exited with {code} (its "
                                   f"log is above); nothing was changed: run the audit again", pipeline=check.pipeline)
            error.transient = code != JobExit.TERMINAL
            raise error
        return json.loads(result.read_text())


if __name__ == "__main__":
    sys.exit(main())
