"""A class-data-sharing (CDS) archive for the test run's short-lived Spark JVMs.

`make test` starts dozens of spark-submit JVMs (ingest jobs, crash-point runs, each worker's
SparkSession), each for a few seconds of work on a handful of records. Most of each one's CPU goes
into loading and JIT-compiling Spark, Scala and Delta classes. This module runs one training job that
loads the classes an ingest job loads (the Kafka source, a Delta write and read) and has the JVM dump
them at exit (``-XX:ArchiveClassesAtExit``); every later JVM maps that archive instead of parsing the
classes again, and stops at the C1 compiler (``-XX:TieredStopAtLevel=1``), which is the right trade for
a JVM that lives seconds. Measured on 2 cores: 31.6 → 15.3 CPU-seconds per small Delta job.

CDS applies only when the JVM's class path starts with the training JVM's, and the JDK refuses to
dump a class path with a non-empty directory on it; Spark puts ``$SPARK_CONF_DIR`` first, so the test
run points SPARK_CONF_DIR at an empty folder (a caller's own configuration folder, which Tidemark
leaves alone). A JVM whose class path differs (another virtualenv, the Connect server) just runs
without the archive: the JVM options below keep its CDS warnings quiet.

    python -m devkit.spark_cds   # against the broker on $KAFKA_PORT; prints the test run's variables

Tidemark's launchers share class data for a user's jobs the same way (``tidemark_spark.class_data``);
the test run keeps an archive of its own, trained up front while the services start and used by every
Spark JVM of the run (the launchers then leave class-data sharing to these options).

The archive is kept once per user, in TIDEMARK_USER_JVM_CACHE (``~/.cache/tidemark/jvm``, beside the jar
cache of scripts/fetch_jars.sh), under a key of the Java version, Spark's folder, the jars (each one's path,
size and modification time, which the JDK checks before it maps an archive) and this file: a second `make test`
of the same checkout, or of a fresh clone at the same path (CI's), reuses it instead of training again
(about 200 s of the slower CPU model's run before the first test), and anything that changes the class path
builds a new one. The KEEP archives used last are kept (about 200 MB each); older ones are deleted.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tidemark.settings import spark_jars
from tidemark_spark import submit
from tidemark_spark.class_data import QUIET
from tidemark_spark.ingest_job import SNAPSHOT_PARTITIONS
from tidemark_spark.submit import local_spark_env

SHORT_LIVED = "-XX:TieredStopAtLevel=1"


def empty_conf_dir(path: Path) -> Path:
    """The run's SPARK_CONF_DIR: Tidemark's own default (``submit.empty_conf_dir``), so that a job a test launches
    as a user would, without the run's SPARK_CONF_DIR, has the same class path and maps the archive too."""
    if any(path.iterdir()):
        raise SystemExit(f"{path} must stay empty: the JDK cannot archive a class path with a non-empty folder")
    return path


KEEP = 3


def archive_key(spark_env: dict[str, str]) -> str:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True).stderr
    jars = [*sorted((Path(spark_env["SPARK_HOME"]) / "jars").glob("*.jar")), *map(Path, spark_jars())]
    stamps = [f"{jar.resolve()} {jar.stat().st_size} {jar.stat().st_mtime_ns}" for jar in jars]
    parts = [java, spark_env["SPARK_HOME"], spark_env["SPARK_CONF_DIR"], *spark_jars(), *stamps,
             Path(__file__).read_text()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def user_cache() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tidemark" / "jvm"
    return Path(os.environ.get("TIDEMARK_USER_JVM_CACHE", default))


def _prune(cache: Path, keep: Path) -> None:
    """Leave ``keep`` and the KEEP - 1 other archives used last (a use touches its file)."""
    others = sorted((a for a in cache.glob("spark-*.jsa") if a != keep), key=lambda a: a.stat().st_mtime,
                    reverse=True)
    for old in others[KEEP - 1:]:
        old.unlink(missing_ok=True)


def _train(spark_env: dict[str, str], archive: Path) -> None:
    """One job that loads what an ingest job loads, dumping its classes to ``archive`` at exit."""
    from devkit import localstack  # not at module level: the job itself runs this file as a script

    partial = archive.with_suffix(f".{os.getpid()}.partial")  # two runs training at once write apart
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="tidemark-cds-") as work:
        command = [str(Path(spark_env["SPARK_HOME"]) / "bin" / "spark-submit"), "--master", "local[2]",
                   "--driver-memory", "1g", "--jars", ",".join(spark_jars()),
                   "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
                   "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
                   "--conf", "spark.ui.enabled=false",  # and Delta's snapshots as the ingest job rebuilds them:
                   "--conf", f"spark.databricks.delta.snapshotPartitions={SNAPSHOT_PARTITIONS}",  # 50 doubled the CPU
                   __file__, "--job", localstack.bootstrap(),
                   localstack.create_topic(localstack.unique("cds"), partitions=1), work]
        env = {**os.environ, **spark_env,
               "SPARK_SUBMIT_OPTS": f"{SHORT_LIVED} -XX:ArchiveClassesAtExit={partial} {QUIET}"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not partial.is_file():
        raise SystemExit(f"the CDS training job failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    partial.rename(archive)


def _job(bootstrap: str, topic: str, work: str) -> None:
    """The training job (runs under spark-submit): a Kafka read, JSON parsed, a Delta append, a MERGE (keyed
    tables) and a Delta read."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    table = f"{work}/table"
    kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("endingOffsets", "latest").load())
    kafka.selectExpr("CAST(value AS STRING) AS value", "partition", "offset", "timestamp").collect()
    rows = spark.range(100).selectExpr("id", "CAST(id AS STRING) AS value", "current_timestamp() AS at",
                                       "from_json(to_json(named_struct('a', id)), 'a bigint').a AS parsed")
    rows.write.format("delta").mode("append").option("txnAppId", "cds").option("txnVersion", 1).save(table)
    spark.sql(f"MERGE INTO delta.`{table}` t USING (SELECT id, value, at, parsed FROM delta.`{table}` WHERE id < 10) u "
              "ON t.id = u.id WHEN MATCHED AND u.parsed IS NULL THEN DELETE WHEN MATCHED THEN UPDATE SET * "
              "WHEN NOT MATCHED THEN INSERT *")
    spark.read.format("delta").load(table).groupBy("value").count().collect()
    spark.stop()


def main(argv: list[str]) -> None:
    if argv[:1] == ["--job"]:
        _job(*argv[1:4])
        return
    cache = user_cache()
    cache.mkdir(parents=True, exist_ok=True)
    spark_env = {**local_spark_env(), "SPARK_CONF_DIR": str(empty_conf_dir(Path(submit.empty_conf_dir())))}
    archive = (cache / f"spark-{archive_key(spark_env)}.jsa").resolve()
    if archive.is_file():
        archive.touch()
        print(f"spark_cds: the class-data archive of this class path, from an earlier run: {archive}", file=sys.stderr)
    else:
        _train(spark_env, archive)
    _prune(cache, archive)
    print(f"SPARK_CONF_DIR={spark_env['SPARK_CONF_DIR']}")
    print(f"SPARK_SUBMIT_OPTS={SHORT_LIVED} -XX:SharedArchiveFile={archive} {QUIET}")


if __name__ == "__main__":
    main(sys.argv[1:])
