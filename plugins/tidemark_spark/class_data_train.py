"""The class-data archive's trainer (``class_data``): a process of its own that outlives the job which started it,
so that no task and no DAG run waits for the JVM to write the archive.

A launch that finds no archive for its class path starts this module detached (a new session, its output in
``<archive>.training.log``) and runs its own job without class-data sharing. The trainer runs one short Spark
job with the ingest job's class path (the same ``SPARK_HOME``, ``SPARK_CONF_DIR``, jars and core archive) on a
``local[1]`` master, whose JVM dumps the classes it loaded as it exits (``-XX:ArchiveClassesAtExit``): a Delta
table created, appended to with a marker, merged into and read back, JSON parsed, a Kafka read planned.
Then it moves the dump into place atomically and removes the lock (``ClassData.finish``); every later job on the
host maps the archive.

    python -m tidemark_spark.class_data_train --archive A --partial P --jars J1,J2   # what a launch starts
    python -m tidemark_spark.class_data_train --now                                # train in the foreground
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

from tidemark_spark import class_data

log = logging.getLogger(__name__)

MASTER = "local[1]"
TRAINER_NICENESS = 10
"""A trainer a job started runs at this lower CPU priority (and so does its JVM): it is off the critical path, and on a
small host it shares the cores with the jobs that follow the one that started it."""
TRAINING_JIT = "-XX:TieredStopAtLevel=1"
"""The training JVM compiles with C1 only: it lives a minute, and an archive holds classes, not compiled code, so
C2's compile threads would only take CPU from the host's jobs (the trainer runs beside them)."""


def spark_work() -> None:
    """Inside the training JVM: load the classes an ingest job loads."""
    import shutil
    import tempfile

    from pyspark.sql import functions as F

    from tidemark_spark.ingest_job import build_session

    spark = build_session("class-data-training")
    folder = tempfile.mkdtemp(prefix="tidemark-cds-train-")
    table = str(Path(folder) / "t")
    try:
        rows = spark.range(200).select(F.col("id"), F.col("id").cast("string").alias("s"),
                                       F.current_timestamp().alias("at"),
                                       F.to_json(F.struct(F.col("id").alias("a"))).alias("j"))
        for version in (1, 2):  # two appends of other keys: the MERGE below matches each row of the table once
            (rows.withColumn("id", F.col("id") + 200 * (version - 1)).write.format("delta").mode("append")
             .option("txnAppId", "train").option("txnVersion", str(version)).option("userMetadata", "{}").save(table))
        spark.sql(f"MERGE INTO delta.`{table}` t USING (SELECT id, s FROM delta.`{table}` WHERE id < 10) u "
                  f"ON t.id = u.id WHEN MATCHED THEN UPDATE SET s = u.s WHEN NOT MATCHED THEN INSERT (id, s) "
                  f"VALUES (u.id, u.s)")
        read = spark.read.format("delta").load(table)
        read.select(F.from_json("j", "a bigint").alias("p")).groupBy("p.a").count().collect()
        spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
        kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
                 .option("assign", '{"t":[0]}').option("startingOffsets", '{"t":{"0":0}}')
                 .option("endingOffsets", '{"t":{"0":1}}').load())
        _ = kafka.select(F.col("value").cast("string")).schema  # analyzed, never run: no broker is contacted
    finally:
        spark.stop()
        shutil.rmtree(folder, ignore_errors=True)


def command(jars: list[str]) -> list[str]:
    """The training job's spark-submit command: the ingest job's class path, this file as the application."""
    from tidemark_spark.submit import DEFAULT_CONF, core_archive, local_spark_env

    spark_submit = str(Path(local_spark_env()["SPARK_HOME"]) / "bin" / "spark-submit")
    conf = [arg for key, value in DEFAULT_CONF.items() for arg in ("--conf", f"{key}={value}")]
    return [spark_submit, "--master", MASTER, "--driver-memory", "1g", "--name", "tidemark-class-data-training",
            "--jars", ",".join(jars), "--py-files", core_archive(), *conf, str(Path(__file__).resolve()), "--inside"]


def train(archive: Path, partial: Path, jars: list[str], env: dict[str, str]) -> int:
    """Run the training job with its JVM dumping to ``partial``, then keep the dump as ``archive`` (or note a
    failed dump) and release the lock. Returns the job's exit code."""
    sharing = class_data.ClassData(f"-XX:ArchiveClassesAtExit={partial} {TRAINING_JIT} {class_data.QUIET}", archive,
                                   partial)
    code = -1
    try:
        code = subprocess.call(command(jars), env=sharing.environment(env), stdin=subprocess.DEVNULL)
    finally:
        sharing.finish(code)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidemark_spark.class_data_train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--archive", type=Path)
    parser.add_argument("--partial", type=Path)
    parser.add_argument("--jars", default="")
    parser.add_argument("--now", action="store_true", help="train in the foreground unless an archive exists")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.inside:
        spark_work()
        return 0
    if args.now:
        from tidemark.settings import spark_jars
        from tidemark_spark.submit import job_environment

        env = job_environment(MASTER)
        started = class_data.prepare(env, MASTER, {}, spark_jars(), train=True, background=False)
        if started.partial is None:
            print(f"class-data archive: {started.archive or 'not trained'} "
                  f"({'already there' if started.archive else class_data.why_not(env, MASTER, {}) or 'busy'})")
            return 0
        return train(started.archive, started.partial, spark_jars(), env)
    if args.archive is None or args.partial is None:
        parser.error("--archive and --partial (or --now)")
    os.nice(TRAINER_NICENESS)  # started by a job (class_data.prepare), in the background
    return train(args.archive, args.partial, [j for j in args.jars.split(",") if j], dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
