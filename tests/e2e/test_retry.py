"""An Airflow retry of the ingest task reads the same frozen ranges: records produced between
the failed attempt and the retry land in the next batch, not in this one."""

from __future__ import annotations

import threading

import pytest

from tests import helpers
from tidemark import crash

pytestmark = pytest.mark.e2e


def test_retry_after_the_spark_driver_is_killed_reads_the_same_frozen_ranges(stack, spark_connect, tmp_path):
    topic = helpers.create_topic(helpers.unique("retry"), partitions=2)
    dag_id = stack.add_pipeline(topic, [topic], retries=1, retry_delay_seconds=1)
    table = str(stack.lake / topic)
    helpers.produce(topic, 40)
    crashed = tmp_path / "crashed"

    def produce_after_the_crash() -> None:
        helpers.wait_until(crashed.exists, 300, "the Spark driver to be killed during its read", interval=0.1)
        helpers.produce(topic, 30, start=40)

    producer = threading.Thread(target=produce_after_the_crash)
    producer.start()
    stack.env.update({"TIDEMARK_CRASH_AT": crash.DURING_READ, "TIDEMARK_CRASH_ONCE": str(crashed)})
    run = stack.run_dag(dag_id)
    producer.join()
    assert crashed.exists(), "the Spark driver was never killed"
    assert run.state == "success" and run.task_states["ingest"] == "success"
    assert "TIDEMARK_CRASH_AT=during_read" in run.log
    assert helpers.query(table, "SELECT COUNT(*) AS n, MIN(ingest_batch_id) AS lo, MAX(ingest_batch_id) AS hi "
                                "FROM t") == [{"n": 40, "lo": 1, "hi": 1}]

    del stack.env["TIDEMARK_CRASH_AT"]
    stack.use_spark_connect(spark_connect)  # the next batch needs no JVM of its own
    run = stack.run_dag(dag_id)
    assert run.task_states["ingest"] == "success"
    assert helpers.query(table, "SELECT ingest_batch_id AS b, COUNT(*) AS n FROM t GROUP BY ingest_batch_id "
                                "ORDER BY b") == [{"b": 1, "n": 40}, {"b": 2, "n": 30}]
