"""The path users take when they outgrow one machine: the ingest DAG through Airflow, the driver in the
Airflow task (client mode) on a Spark standalone cluster of a master and two workers (each with its own
working directory), the core shipped to executors with --py-files, and every table on the local S3
server, with the storage credentials in the `aws_default` connection. Nothing shares a local folder:
the workers write the output's files to S3 and the driver commits them there.

The connection's secret key is a canary; like the Kafka password in test_security.py, it must appear
in no command line, task log, XCom, metadata DB file, Spark event log, or CLI output."""

from __future__ import annotations

import json

import pytest

from tests import helpers
from tests.e2e.test_security import CommandLines, airflow_files, event_logs, files_with, texts_with, xcom_values
from tidemark import storage

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CANARY = "canary-s3-secret-5be07c"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with helpers.StandaloneCluster(tmp_path_factory.mktemp("spark_cluster"), workers=2, cores=1,
                                   memory="768m") as running:
        yield running


def test_the_ingest_dag_on_a_two_worker_cluster_with_the_lake_on_s3(cluster, stack, airflow_home, tmp_path):
    topic = helpers.create_topic(helpers.unique("cluster"), partitions=4)
    lake = helpers.s3_lake(topic)
    events = tmp_path / "events"
    events.mkdir()
    host, port = cluster.master.rsplit(":", 1)
    stack.env.update(TIDEMARK_LAKE_ROOT=lake, AIRFLOW_CONN_AWS_DEFAULT=helpers.aws_connection(CANARY),
                     AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": host, "port": int(port)}))
    dag_id = stack.add_pipeline(topic, [topic], spark_conf={
        "spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2",
        "spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
        "spark.eventLog.dir": f"file://{events}"})
    produced = helpers.produce(topic, 200)
    sampler = CommandLines()
    sampler.start()

    first = stack.run_dag(dag_id)
    assert first.state == "success", first.log[-6000:]
    produced.update(helpers.produce(topic, 40, start=200))
    second = stack.run_dag(dag_id)
    assert second.state == "success", second.log[-6000:]
    shown = stack.tidemark("offsets", "show", topic, "--json")
    assert shown.returncode == 0, shown.stderr
    lines = sampler.stop()

    # Every record exactly once, read back by delta-rs under the other spelling (s3://).
    table = storage.delta_rs_uri(f"{lake}/{topic}")
    rows = helpers.query(table, "SELECT kafka_partition AS p, COUNT(*) AS n, COUNT(DISTINCT kafka_offset) AS d, "
                                "MAX(ingest_batch_id) AS b FROM t GROUP BY p")
    assert {r["p"]: (r["n"], r["d"]) for r in rows} == {p: (n, n) for p, n in produced.items()}
    assert {r["b"] for r in rows} == {2}
    assert {o["partition"]: o["committed_offset"] for o in json.loads(shown.stdout)} == helpers.end_offsets(topic)

    # A cluster application, with executors on both workers, the core shipped with --py-files.
    apps = [a for a in cluster.state()["completedapps"] if a["name"] == f"tidemark-{topic}"]
    assert len(apps) == 2, cluster.state()["completedapps"]
    for i in range(2):
        executor_dirs = [d for app in apps for d in (cluster.worker_dir(i) / app["id"]).glob("*")]
        assert executor_dirs, f"no executor of this pipeline ran on worker {i}"
    submits = [line for line in lines if "tidemark_spark/ingest.py" in line and topic in line]
    assert any("--py-files" in line and "tidemark-py-files/tidemark-" in line for line in submits), submits

    # The secret key went nowhere it could be read.
    xcoms = xcom_values(airflow_home, dag_id)
    assert files_with(CANARY, [*airflow_files(airflow_home), events]) == {}
    assert texts_with(CANARY, {**xcoms, "ps": "\n".join(lines), **event_logs(events), "task logs": first.log +
                               second.log, "offsets show": shown.stdout + shown.stderr}) == {}
