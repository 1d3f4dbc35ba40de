"""The path users take when they outgrow one machine: the ingest DAG through Airflow, the driver in the
Airflow task (client mode) on a Spark standalone cluster of a master and two workers (each with its own
working directory), the core shipped to executors with --py-files, and every table on the local S3
server, with the storage credentials in the `aws_default` connection. Nothing shares a local folder:
the workers write the output's files to S3 and the driver commits them there.

The connection's secret key is a canary; like the Kafka password in test_security.py, it must appear
in no command line, task log, XCom, metadata DB file, Spark event log, or CLI output.

Chaos on the same cluster: a worker killed -9 (its JVM and its executor, as when its host dies) while the
write stage of a batch has a task running on it. The kill lands there every time: the driver stops itself
just before the write (``TIDEMARK_PAUSE_AT``), the test freezes that worker's executor (SIGSTOP), lets the
driver go on and kills the worker once the driver's REST API shows the frozen executor holding a task. Spark
runs that task again on the other worker and the batch commits once. It runs last: the cluster keeps one
worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request

import psutil
import pytest

from devkit import faults
from tests import helpers
from tests.e2e.conftest import ROOT
from tests.e2e.test_security import CommandLines, airflow_files, event_logs, files_with, texts_with, xcom_values
from tidemark import fault_injection, storage
from tidemark_spark.submit import INGEST_SCRIPT

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

    # One DAG run: what is particular to the cluster (executors on both workers writing to S3, the core
    # shipped with --py-files, the secret kept out of every file and command line) happens in each run, and
    # a second would cost a driver and two executor JVMs more. Later batches on S3 are tested by spark-submit
    # (test_lake_on_s3.py) and through the DAG (test_celery_chaos.py, test_moving_table_dag.py).
    first = stack.run_dag(dag_id)
    assert first.state == "success", first.log[-6000:]
    shown = stack.tidemark("offsets", "show", topic, "--json")
    assert shown.returncode == 0, shown.stderr
    lines = sampler.stop()

    # Every record exactly once, read back by delta-rs under the other spelling (s3://).
    table = storage.delta_rs_uri(f"{lake}/{topic}")
    rows = helpers.query(table, "SELECT kafka_partition AS p, COUNT(*) AS n, COUNT(DISTINCT kafka_offset) AS d, "
                                "MAX(ingest_batch_id) AS b FROM t GROUP BY p")
    assert {r["p"]: (r["n"], r["d"]) for r in rows} == {p: (n, n) for p, n in produced.items()}
    assert {r["b"] for r in rows} == {1}
    assert {o["partition"]: o["committed_offset"] for o in json.loads(shown.stdout)} == helpers.end_offsets(topic)

    # A cluster application, with executors on both workers, the core shipped with --py-files.
    apps = [a for a in cluster.state()["completedapps"] if a["name"] == f"tidemark-{topic}"]
    assert len(apps) == 1, cluster.state()["completedapps"]
    for i in range(2):
        executor_dirs = [d for app in apps for d in (cluster.worker_dir(i) / app["id"]).glob("*")]
        assert executor_dirs, f"no executor of this pipeline ran on worker {i}"
    submits = [line for line in lines if INGEST_SCRIPT in line and topic in line]
    assert any("--py-files" in line and "tidemark-py-files/tidemark-" in line for line in submits), submits

    # The secret key went nowhere it could be read.
    xcoms = xcom_values(airflow_home, dag_id)
    assert files_with(CANARY, [*airflow_files(airflow_home), events]) == {}
    assert texts_with(CANARY, {**xcoms, "ps": "\n".join(lines), **event_logs(events), "task logs": first.log,
                               "offsets show": shown.stdout + shown.stderr}) == {}


def driver_api(port: int, path: str = ""):
    """The driver's monitoring REST API (its UI on ``port``): the application's ``path``; None while it does
    not answer (its first answer, which starts Jersey, took more than 5 s on the loaded machine)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/applications", timeout=30) as response:
            app = json.load(response)[0]["id"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/applications/{app}{path}",
                                    timeout=30) as response:
            return json.load(response)
    except (OSError, ValueError, IndexError):
        return None


def stopped_driver(run: subprocess.Popen) -> psutil.Process | None:
    """The run's Spark driver (ingest.py under spark-submit) once it has stopped itself."""
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == run.pid and any(a.endswith("ingest.py") for a in process.cmdline()) \
                    and process.status() == psutil.STATUS_STOPPED:
                return process
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    return None


def executor_id(process: psutil.Process) -> str:
    args = process.cmdline()
    return args[args.index("--executor-id") + 1]


def test_a_worker_killed_9_mid_stage_its_tasks_run_again_on_the_other_worker_and_the_batch_commits_once(
        cluster, stack, tmp_path):
    topic = helpers.create_topic(helpers.unique("workerkill"), partitions=4)
    lake = helpers.s3_lake(topic)
    events, ui_port = tmp_path / "events", helpers.free_port()
    events.mkdir()
    host, port = cluster.master.rsplit(":", 1)
    stack.env.update(TIDEMARK_LAKE_ROOT=lake, AIRFLOW_CONN_AWS_DEFAULT=helpers.aws_connection(),
                     AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": host, "port": int(port)}))
    stack.add_pipeline(topic, [topic], spark_conf={
        "spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2",
        # both executors registered before the first task, so one task goes to each worker
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        "spark.ui.enabled": "true", "spark.ui.port": str(ui_port), "spark.port.maxRetries": "0",
        "spark.eventLog.enabled": "true", "spark.eventLog.compress": "false", "spark.eventLog.dir": f"file://{events}"})
    produced = helpers.produce(topic, 400)
    log, doomed = tmp_path / "run.log", None
    with log.open("w") as out:
        run = subprocess.Popen([str(ROOT / ".venv" / "bin" / "tidemark"), "run", topic],
                               env={**stack.env, "TIDEMARK_PAUSE_AT": fault_injection.AFTER_DEAD_LETTERS}, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        helpers.wait_until(lambda: stopped_driver(run) or run.poll() is not None, 300,
                           lambda: f"the driver to stop before the write\n{log.read_text()[-4000:]}", interval=0.5)
        assert run.poll() is None, log.read_text()[-4000:]
        executors = {i: faults.spark_executors(cluster.work, i) for i in (0, 1)}
        assert all(len(e) == 1 for e in executors.values()), executors
        doomed = executors[0][0]
        doomed_id = executor_id(doomed)
        doomed.suspend()  # the task it is given stays running
        os.killpg(run.pid, signal.SIGCONT)

        def holds_a_task():
            listed = {e["id"]: e["activeTasks"] for e in driver_api(ui_port, "/executors") or ()}
            return listed.get(doomed_id, 0) > 0
        helpers.wait_until(holds_a_task, 120, lambda: f"executor {doomed_id} on worker 0 to be given a "
                                                      f"task\n{log.read_text()[-4000:]}", interval=0.2)
        stage = [s["stageId"] for s in driver_api(ui_port, "/stages?status=active") or ()]
        killed = faults.kill_spark_worker(cluster.work, 0)
        assert run.wait(timeout=300) == 0, log.read_text()[-6000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        if doomed is not None and doomed.is_running():
            doomed.resume()
    print(f"worker 0 killed -9 (pids {killed}) while stage {stage} had a task on executor {doomed_id}")

    # Spark lost that task with its executor and ran it again on the other worker.
    ends = [json.loads(line) for f in events.rglob("events_*") for line in f.read_text().splitlines()
            if '"SparkListenerTaskEnd"' in line]
    lost = [e for e in ends if e["Task Info"]["Executor ID"] == doomed_id and e["Task Info"]["Failed"]]
    assert lost and {e["Task End Reason"]["Reason"] for e in lost} == {"ExecutorLostFailure"}, ends
    again = [e for e in ends if e["Task Info"]["Index"] in {x["Task Info"]["Index"] for x in lost}
             and e["Task Info"]["Executor ID"] != doomed_id and e["Task End Reason"]["Reason"] == "Success"]
    assert len(again) == len(lost), ends
    # Every record once, the ledger's one batch holding exactly what was produced.
    table = storage.delta_rs_uri(f"{lake}/{topic}")
    rows = helpers.query(table, "SELECT kafka_partition AS p, COUNT(*) AS n, COUNT(DISTINCT kafka_offset) AS d, "
                                "MIN(kafka_offset) AS lo, MAX(kafka_offset) AS hi FROM t GROUP BY p")
    assert {r["p"]: (r["n"], r["d"], r["lo"], r["hi"]) for r in rows} == {
        p: (n, n, 0, n - 1) for p, n in produced.items()}
    history = stack.tidemark("offsets", "history", topic, "--json")
    assert history.returncode == 0, history.stderr
    assert {(r["batch_id"], r["status"], r["partition"], r["start_offset"], r["end_offset"], r["record_count"])
            for r in json.loads(history.stdout)} == {(1, "committed", p, 0, n, n) for p, n in produced.items()}
    audit = stack.tidemark("audit", topic, "--json")
    assert audit.returncode == 0 and json.loads(audit.stdout)["ok"], audit.stdout + audit.stderr
