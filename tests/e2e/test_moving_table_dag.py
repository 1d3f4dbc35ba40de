"""Object storage, round 2 (issue 24), through Airflow: a table on a bucket that does not exist fails the
plan task at once (terminal, no retry) with nothing frozen; a table that moves from the local disk to the
local S3 server keeps its Airflow asset (before, Airflow refused the ingest task's outlet as an inactive
asset) and the pipeline carries on from its committed position, every record once. The ingest jobs run on
the warm path (the test run's Spark Connect server serves the local S3 server too)."""

from __future__ import annotations

import pytest

from tests import helpers
from tidemark import storage
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.e2e


def test_a_missing_bucket_fails_the_plan_task_without_retries_and_freezes_nothing(stack):
    topic = helpers.create_topic(helpers.unique("nobucket"), partitions=1)
    helpers.produce(topic, 5)
    missing = f"s3a://no-such-bucket-{topic.replace('_', '-')}/{topic}"
    dag_id = stack.add_pipeline(topic, [topic], table=missing, retries=2)
    stack.env["AIRFLOW_CONN_AWS_DEFAULT"] = helpers.aws_connection()
    run = stack.run_dag(dag_id)
    # failed, not up_for_retry: a terminal error fails the task at once, whatever its retries
    assert run.state == "failed" and run.task_states["plan"] == "failed", run.log[-4000:]
    assert run.task_states["ingest"] in ("upstream_failed", None)
    assert "StorageLocationError" in run.log and missing in run.log and "does not exist" in run.log
    assert Ledger(str(stack.lake / "_tidemark" / "offsets")).rows(topic) == []


def test_a_table_moved_from_the_disk_to_s3_keeps_its_asset_and_continues_exactly_once(stack, spark_connect):
    stack.use_spark_connect(spark_connect)
    stack.env["AIRFLOW_CONN_AWS_DEFAULT"] = helpers.aws_connection()
    topic = helpers.create_topic(helpers.unique("moved"), partitions=2)
    dag_id = stack.add_pipeline(topic, [topic])
    helpers.produce(topic, 20)
    first = stack.run_dag(dag_id)
    assert first.task_states["ingest"] == "success", first.log[-4000:]
    assert helpers.query(str(stack.lake / topic), "SELECT COUNT(*) AS n FROM t") == [{"n": 20}]

    moved = f"{helpers.s3_lake(topic)}/{topic}"  # the table now lives on S3; its ledger stays where it was
    stack.add_pipeline(topic, [topic], table=moved)
    helpers.produce(topic, 10, start=20)
    second = stack.run_dag(dag_id)
    assert second.task_states["ingest"] == "success", second.log[-4000:]
    assert "inactive assets" not in second.log
    rows = helpers.query(storage.delta_rs_uri(moved), "SELECT COUNT(*) AS n, COUNT(DISTINCT kafka_partition || ':' "
                                                       "|| kafka_offset) AS d, MIN(ingest_batch_id) AS b FROM t")
    assert rows == [{"n": 10, "d": 10, "b": 2}]  # the new records only, from the committed position
    ledger = Ledger(str(stack.lake / "_tidemark" / "offsets"))
    assert {(r.batch_id, r.status) for r in ledger.rows(topic)} == {(1, "committed"), (2, "committed")}
