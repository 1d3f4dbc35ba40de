"""An Airflow retry of the ingest task reads the same frozen ranges: records produced between
the failed attempt and the retry land in the next batch, not in this one."""

from __future__ import annotations

import os
import threading

import pytest

from tests import helpers
from tidemark import fault_injection

pytestmark = pytest.mark.e2e


def test_retry_after_the_spark_driver_is_killed_reads_the_same_frozen_ranges(stack, spark_connect, tmp_path):
    """The killed attempt is a spark-submit driver (the kill must end the driver itself: on the warm path it would
    end only the server's client). Once it is dead the Spark connection becomes the test run's Spark Connect
    server, so the retry, which reads its ranges from the plan task's XCom whatever launches it, starts no JVM of
    its own: the switch comes at least the retry delay (1 s) before the retry asks for the connection."""
    topic = helpers.create_topic(helpers.unique("retry"), partitions=2)
    dag_id = stack.add_pipeline(topic, [topic], retries=1, retry_delay_seconds=1)
    table = str(stack.lake / topic)
    helpers.produce(topic, 40)
    crashed = tmp_path / "crashed"
    warm = helpers.spark_connect_connection(spark_connect)

    def after_the_crash() -> None:
        helpers.wait_until(crashed.exists, 300, "the Spark driver to be killed during its read", interval=0.1)
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = warm  # run_dag's environment, restored when the run ends
        helpers.produce(topic, 30, start=40)

    producer = threading.Thread(target=after_the_crash)
    producer.start()
    stack.env.update({"TIDEMARK_CRASH_AT": fault_injection.DURING_READ, "TIDEMARK_CRASH_ONCE": str(crashed)})
    run = stack.run_dag(dag_id)
    producer.join()
    assert crashed.exists(), "the Spark driver was never killed"
    assert run.state == "success" and run.task_states["ingest"] == "success"
    assert "TIDEMARK_CRASH_AT=during_read" in run.log
    # the killed attempt by spark-submit, the retry on the Connect server
    assert "Spark-Submit cmd" in run.log and "on the Spark Connect server" in run.log
    assert helpers.query(table, "SELECT COUNT(*) AS n, MIN(ingest_batch_id) AS lo, MAX(ingest_batch_id) AS hi "
                                "FROM t") == [{"n": 40, "lo": 1, "hi": 1}]

    del stack.env["TIDEMARK_CRASH_AT"]
    stack.use_spark_connect(spark_connect)  # the next batch needs no JVM of its own
    run = stack.run_dag(dag_id)
    assert run.task_states["ingest"] == "success"
    assert helpers.query(table, "SELECT ingest_batch_id AS b, COUNT(*) AS n FROM t GROUP BY ingest_batch_id "
                                "ORDER BY b") == [{"b": 1, "n": 40}, {"b": 2, "n": 30}]
