"""The distributed path: a Spark standalone master and worker started from the installed pyspark
on 127.0.0.1, and `tidemark run` submitting the ingest job to it (the core shipped to executors with
--py-files). Only the Spark connection changes."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests import helpers
from tidemark_spark.submit import local_spark_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _master_state(ui_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("spark_cluster")
    port, ui_port = helpers.free_port(), helpers.free_port()
    spark_class = str(Path(local_spark_env()["SPARK_HOME"]) / "bin" / "spark-class")
    env = {**os.environ, **local_spark_env(), "SPARK_DAEMON_MEMORY": "256m", "SPARK_LOG_DIR": str(work),
           "SPARK_WORKER_DIR": str(work / "worker")}
    procs = []
    for args in (["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                  "--webui-port", str(ui_port)],
                 ["org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host", "127.0.0.1",
                  "--cores", "2", "--memory", "1g", "--webui-port", str(helpers.free_port())]):
        log = open(work / f"{args[0].rsplit('.', 1)[-1]}.log", "w")  # noqa: SIM115 - lives as long as the process
        procs.append(subprocess.Popen([spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if _master_state(ui_port).get("aliveworkers", 0) >= 1:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "\n".join(f.read_text()[-2000:] for f in work.glob("*.log"))
                pytest.fail(f"the Spark standalone master and worker did not come up:\n{logs}")
            time.sleep(1)
        yield f"spark://127.0.0.1:{port}", ui_port
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_tidemark_run_on_a_standalone_cluster(spark_cluster, kafka_bootstrap, tmp_path):
    master, ui_port = spark_cluster
    host, port = master.rsplit(":", 1)
    topic = helpers.create_topic(helpers.unique("cluster"), partitions=3)
    produced = helpers.produce(topic, 90)
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / f"{topic}.yaml").write_text(
        f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n"
        "spark_conf: {spark.executor.memory: 512m, spark.cores.max: '2'}\n")
    env = helpers.service_env(pipelines, tmp_path / "lake",
                              AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": host,
                                                                     "port": int(port)}))
    result = subprocess.run([str(ROOT / ".venv" / "bin" / "tidemark"), "run", topic], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]

    rows = helpers.query(str(tmp_path / "lake" / topic), "SELECT kafka_partition AS p, COUNT(*) AS n, "
                                                         "COUNT(DISTINCT kafka_offset) AS d FROM t GROUP BY p")
    assert {r["p"]: (r["n"], r["d"]) for r in rows} == {p: (n, n) for p, n in produced.items()}
    # The application ran on the cluster's executors, not in local mode.
    apps = _master_state(ui_port)["completedapps"] + _master_state(ui_port)["activeapps"]
    assert any(app["name"] == f"tidemark-{topic}" for app in apps), apps
