"""The warm path's failure modes that the crash-point and DAG tests do not reach: a Spark Connect server
that does not answer leaves the batch planned with nothing written, and the next run on a live server
executes the same frozen ranges."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import helpers
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_a_server_that_does_not_answer_leaves_the_batch_planned_and_the_next_run_reads_it(
        kafka_bootstrap, spark_connect, tmp_path):
    pipelines, lake = tmp_path / "pipelines", tmp_path / "lake"
    pipelines.mkdir()
    topic = helpers.create_topic(helpers.unique("warm"), partitions=2)
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n")
    produced = helpers.produce(topic, 40)
    closed = helpers.free_port()  # nothing listens there
    env = helpers.service_env(pipelines, lake,
                              AIRFLOW_CONN_SPARK_DEFAULT=helpers.spark_connect_connection(f"sc://127.0.0.1:{closed}"))

    def tidemark_run() -> subprocess.CompletedProcess:
        return subprocess.run([str(ROOT / ".venv" / "bin" / "tidemark"), "run", topic], env=env, capture_output=True,
                              text=True, timeout=300)

    down = tidemark_run()
    assert down.returncode != 0
    assert f"the Spark Connect server at sc://127.0.0.1:{closed} did not answer" in down.stderr, down.stderr[-3000:]
    assert "SparkConnectUnavailableError" in down.stderr and "scripts/connect.sh up" in down.stderr
    assert "a retry resumes from there" in down.stderr  # transient: Airflow retries the task
    state = Ledger(str(lake / "_tidemark" / "offsets")).state(topic)
    assert state.pending_batch_id == 1 and helpers.query_or_none(str(lake / topic)) is None

    env["AIRFLOW_CONN_SPARK_DEFAULT"] = helpers.spark_connect_connection(spark_connect)
    up = tidemark_run()
    assert up.returncode == 0, up.stderr[-3000:]
    rows = helpers.query(str(lake / topic), "SELECT kafka_partition AS p, COUNT(*) AS n FROM t GROUP BY p")
    assert {r["p"]: r["n"] for r in rows} == dict(produced)
    history = Ledger(str(lake / "_tidemark" / "offsets")).rows(topic)
    assert {r.batch_id for r in history} == {1} and {r.status for r in history} == {"committed"}
    assert sorted((r.partition, r.start_offset, r.end_offset) for r in history) == sorted(
        (r.partition, r.start, r.end) for r in state.pending_ranges)


def test_sessions_on_the_warm_path_server_run_their_tasks_with_one_class_loader(spark_connect):
    """Every warm-path batch is a new Connect session. Spark keys the code it generates by class loader, so sessions
    with loaders of their own (Spark's SparkConnectServer main forces that) compile a batch's code again each time;
    scripts/connect.sh's server shares one loader between sessions (plugins/tidemark_spark/connect_server.py).
    The sessions are opened in a process of their own, as a job opens its one: pyspark switches the process that
    opens a Connect session to Connect mode for good (SPARK_CONNECT_MODE_ENABLED), which would break this worker's
    own SparkSession and the jobs it starts."""
    script = """
import json, sys
from pyspark.sql import SparkSession
found = []
for _ in range(2):
    session = SparkSession.builder.remote(sys.argv[1]).create()
    rows = (session.range(4).repartition(2)  # evaluated in tasks, where the generated code runs
            .selectExpr("reflect('org.apache.spark.util.Utils', 'getContextOrSparkClassLoader') AS loader")
            .distinct().collect())
    found.append({"isolation": session.conf.get("spark.sql.artifact.isolation.enabled"),
                  "loaders": sorted(r.loader for r in rows)})
    session.stop()
print(json.dumps(found))
"""
    result = subprocess.run([sys.executable, "-c", script, spark_connect], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = json.loads(result.stdout.strip().splitlines()[-1])
    assert first["isolation"] == second["isolation"] == "false"
    assert first["loaders"] == second["loaders"] and len(first["loaders"]) == 1, (first, second)
    assert "ExecutorClassLoader" not in first["loaders"][0]  # a session's own loader (isolation) is one of these
