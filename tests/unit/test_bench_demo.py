"""bench/demo_runs.py reads a DAG run's figures from `airflow dags test`'s log: the run, its ingest task, how long the
task went on after its Spark JVM's last line, and whether the JVM was asked for a class-data archive."""

from __future__ import annotations

from bench.demo_runs import read_run, targets

LOG = """\
2026-11-28T14:47:43.945024 [info     ] Filling up the DagBag
2026-11-28T14:47:59.970997Z [info     ] [DAG TEST] starting task_id=ingest map_index=-1 [airflow.sdk.definitions.dag]
2026-11-28T14:48:00.119812Z [info     ] ingesting batch 2 of pipeline 'orders': 1,500 offsets over 3 partitions [x]
2026-11-28T14:48:00.100000Z [info     ] {archive} [tidemark_spark.class_data]
2026-11-28T14:48:00.142496Z [info     ] Spark-Submit cmd: spark-submit --master local[2] [hook]
2026-11-28T14:48:11.805037Z [info     ] 26/11/28 INFO SparkContext: Running Spark [...spark_submit.SparkSubmitHook]
2026-11-28T14:48:50.822215Z [info     ] 26/11/28 INFO Snapshot: Created snapshot [...spark_submit.SparkSubmitHook]
2026-11-28T14:49:14.797481Z [info     ] Task instance state updated    [airflow.api_fastapi]
2026-11-28T14:49:15.261167Z [info     ] [DAG TEST] end task task_id=ingest map_index=-1 [airflow.sdk.definitions.dag]
2026-11-28T14:49:15.439000Z [info     ] DagRun Finished: dag_id=tidemark_ingest__orders, state=success
"""


def test_a_run_that_waited_for_its_jvms_archive_dump():
    # the log line of the launch whose JVM wrote the archive as it exited (before the trainer)
    run = read_run(LOG.format(archive="class-data archive written: /tmp/cds/spark-1.jsa (later jobs map it)"))
    assert run == {"run_seconds": 91.49, "ingest_task_seconds": 75.29, "after_jvm_last_line_seconds": 24.44,
                   "archive": "written by the job's JVM", "offsets": 1500}
    part = {"date": "2026-11-28", "summary": {"second_run_seconds": 91.49, "third_run_seconds": 60.0,
                                              "second_after_jvm_last_line_seconds": 24.44,
                                              "second_archive": run["archive"], "no_wait": False}}
    assert [t["met"] for t in targets(part)] == [False] and "archive: written by" in targets(part)[0]["measured"]


def test_a_run_whose_task_ends_with_its_jvm():
    run = read_run(LOG.format(archive="no class-data archive yet for this class path: process 7 trains one in the "
                                      "background").replace("14:49:14.797481", "14:48:51.100000")
                   .replace("14:49:15.261167", "14:48:51.300000").replace("14:49:15.439000", "14:48:51.500000"))
    assert (run["after_jvm_last_line_seconds"], run["archive"]) == (0.48, "none: the trainer started")
    mapped = read_run(LOG.format(archive="the job's JVM maps the class-data archive /tmp/cds/spark-1.jsa"))
    assert mapped["archive"] == "mapped"
