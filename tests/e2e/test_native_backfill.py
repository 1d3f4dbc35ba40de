"""Airflow 3's native backfill (`airflow backfill create`) against a running Airflow: api-server,
scheduler (LocalExecutor) and dag-processor, started once for this module on a copy of the session's
migrated metadata DB. Each backfill run maps its data interval to a time window of Kafka records;
the committed position does not move."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests import helpers
from tests.e2e.conftest import AIRFLOW, MIGRATED_DB, ROOT

pytestmark = pytest.mark.e2e

DAY = dt.timedelta(days=1)
# Record timestamps (two per partition would be enough; these cover the window edges).
TIMES = ["2025-05-31T23:00", "2025-06-01T00:00", "2025-06-01T12:00", "2025-06-01T23:59:59",
         "2025-06-02T00:00", "2025-06-02T18:00", "2025-06-03T00:00", "2025-06-03T05:00"]
WINDOW = (dt.datetime(2025, 6, 1, tzinfo=dt.UTC), dt.datetime(2025, 6, 3, tzinfo=dt.UTC))
LOGIN = ("watcher", uuid.uuid4().hex)


class Airflow:
    """A running Airflow (api-server, scheduler, dag-processor) on a private home and SQLite DB."""

    def __init__(self, home: Path, env: dict[str, str]):
        self.home, self.env, self.procs = home, env, {}

    def cli(self, *args: str) -> str:
        result = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=300)
        output = result.stdout[-3000:] + result.stderr[-3000:]
        assert result.returncode == 0, f"airflow {' '.join(args)} failed:\n{output}"
        return result.stdout

    def query(self, sql: str, *args) -> list[dict]:
        """Rows of the services' metadata DB (read directly: polling it with the CLI would start an
        Airflow process every few seconds)."""
        with contextlib.closing(sqlite3.connect(self.home / "airflow.db", timeout=30)) as db:
            db.row_factory = sqlite3.Row
            return [dict(row) for row in db.execute(sql, args)]

    def is_parsed(self, dag_id: str) -> bool:
        return bool(self.query("SELECT 1 FROM dag JOIN serialized_dag USING (dag_id) WHERE dag_id = ? "
                               "AND NOT is_stale", dag_id))

    def start(self, port: int) -> None:
        """The scheduler once the api-server answers, as scripts/airflow.sh does: a task queued before the
        execution API answers fails without running."""
        self.url = f"http://127.0.0.1:{port}"
        self.launch("api-server", "--port", str(port))
        self.launch("dag-processor")
        self.wait_for("the api-server", lambda: _answers(f"{self.url}/api/v2/monitor/health"), timeout=240)
        self.launch("scheduler")

    def launch(self, name: str, *args: str) -> None:
        log = open(self.home / f"{name}.out", "w")  # noqa: SIM115 - closed with the process
        self.procs[name] = subprocess.Popen([AIRFLOW, name, *args], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    def wait_for(self, what: str, check, timeout: float = 300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    pytest.fail(f"the Airflow {name} exited (code {proc.returncode}) while waiting for {what}:\n"
                                f"{(self.home / f'{name}.out').read_text()[-3000:]}")
            result = check()
            if result:
                return result
            time.sleep(0.5)
        logs = "\n".join((self.home / f"{n}.out").read_text()[-2000:] for n in ("scheduler", "dag-processor"))
        pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")

    def tidemark(self, *args: str):
        """``tidemark ... --json`` against this Airflow's pipelines, lake and connections."""
        result = subprocess.run([str(ROOT / ".venv" / "bin" / "tidemark"), *args, "--json"], env=self.env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def runs(self, dag_id: str) -> list[dict]:
        return self.query("SELECT run_id, run_type, state FROM dag_run WHERE dag_id = ? ORDER BY id", dag_id)


@pytest.fixture(scope="module")
def pipeline_name() -> str:
    return f"nbf_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def running_airflow(airflow_home, tmp_path_factory, kafka_bootstrap, spark_connect, pipeline_name):
    base = tmp_path_factory.mktemp("native_backfill")
    home, pipelines, lake = base / "home", base / "pipelines", base / "lake"
    home.mkdir()
    pipelines.mkdir()
    (pipelines / f"{pipeline_name}.yaml").write_text(yaml.safe_dump(
        {"name": pipeline_name, "topics": [pipeline_name], "table": pipeline_name, "schedule": "@daily"}))
    (home / "passwords.json").write_text(json.dumps({LOGIN[0]: LOGIN[1]}))
    port = helpers.free_port()
    # Not migrated again: a copy of the session's freshly migrated metadata DB (sqlite3's backup API)
    with sqlite3.connect(MIGRATED_DB) as source, sqlite3.connect(home / "airflow.db") as copy:
        source.backup(copy)
    # Three services and the CLI write to this one file: WAL lets readers go on while one writes
    # (persistent in the file), and the connect args make a writer wait for the lock.
    with contextlib.closing(sqlite3.connect(home / "airflow.db")) as db:
        db.execute("PRAGMA journal_mode=WAL")
    env = helpers.service_env(pipelines, lake, AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
                              AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
                              AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS="devkit.airflow_sqlite.CONNECT_ARGS",
                              PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                              AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__CORE__EXECUTOR="LocalExecutor",
                              AIRFLOW__CORE__PARALLELISM="2",
                              AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
                              AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="30",  # as scripts/airflow.sh sets it
                              AIRFLOW__API_AUTH__JWT_SECRET=uuid.uuid4().hex, AIRFLOW__API__SECRET_KEY=uuid.uuid4().hex,
                              # A real login (the Tidemark page must refuse requests without one).
                              AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{LOGIN[0]}:viewer",
                              AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(home / "passwords.json"),
                              TIDEMARK_EXAMPLE_UPSTREAM=pipeline_name,  # the example DAG scheduled on its table
                              # The scheduler's task processes send their ingest jobs to the warm Spark
                              # (the test run's Spark Connect server): the warm path under a real scheduler.
                              AIRFLOW_CONN_SPARK_DEFAULT=helpers.spark_connect_connection(spark_connect))
    airflow = Airflow(home, env)
    try:
        airflow.start(port)
        yield airflow, lake
    finally:
        airflow.stop()


def test_native_backfill_over_two_past_days_ingests_exactly_those_windows(running_airflow, pipeline_name):
    airflow, lake = running_airflow
    dag_id = f"tidemark_ingest__{pipeline_name}"
    # Backfills need the records to still be there: no time-based retention on this topic.
    topic = helpers.create_topic(pipeline_name, partitions=2, configs={"retention.ms": "-1"})
    downstream = f"tidemark_example_downstream__{pipeline_name}"
    airflow.wait_for("the dag-processor to parse the DAGs", lambda: airflow.is_parsed(dag_id) and
                     airflow.is_parsed(downstream))
    airflow.cli("dags", "unpause", dag_id)
    airflow.cli("dags", "unpause", downstream)
    # The schedule's latest interval runs first: nothing in the topic yet, so no Spark.
    airflow.wait_for("the scheduled run", lambda: [r for r in airflow.runs(dag_id) if r["state"] == "success"])

    helpers.produce_at_times(topic, TIMES)

    airflow.cli("backfill", "create", "--dag-id", dag_id, "--from-date", "2025-06-01", "--to-date", "2025-06-02",
                "--max-active-runs", "1")

    def backfills_done():
        runs = [r for r in airflow.runs(dag_id) if r["run_id"].startswith("backfill__")]
        return runs if len(runs) == 2 and all(r["state"] in ("success", "failed") for r in runs) else None

    runs = airflow.wait_for("the two backfill runs", backfills_done, timeout=600)
    assert {(r["run_type"], r["state"]) for r in runs} == {("backfill", "success")}, runs

    # Exactly the records of [2025-06-01, 2025-06-03): offsets 1..5 of each partition, once each.
    table = str(lake / pipeline_name)
    rows = helpers.query(table, "SELECT kafka_partition AS p, kafka_offset AS o, kafka_timestamp AS ts FROM t "
                                "ORDER BY p, o")
    assert [(r["p"], r["o"]) for r in rows] == [(p, o) for p in (0, 1) for o in range(1, 6)]
    assert all(WINDOW[0] <= r["ts"] < WINDOW[1] for r in rows)

    # One backfill batch per data interval, none of them moves the committed position.
    history = airflow.tidemark("offsets", "history", pipeline_name)
    by_run = {}
    for row in history:
        assert row["kind"] == "backfill" and row["status"] == "committed", row
        by_run.setdefault(row["dag_run_id"], set()).add((row["partition"], row["start_offset"], row["end_offset"]))
    assert by_run == {"backfill__2025-06-02T00:00:00+00:00": {(0, 1, 4), (1, 1, 4)},
                      "backfill__2025-06-03T00:00:00+00:00": {(0, 4, 6), (1, 4, 6)}}
    show = airflow.tidemark("offsets", "show", pipeline_name)
    assert {p["partition"]: p["committed_offset"] for p in show} == {0: None, 1: None}

    # Each committed backfill batch was an event of the table's asset; the scheduler ran the example
    # DAG scheduled on it (dags/tidemark_downstream_example.py), which returns what arrived.
    batches = {row["dag_run_id"]: row["batch_id"] for row in history}

    def downstream_done():
        runs = airflow.runs(downstream)
        if not runs or any(r["state"] not in ("success", "failed") for r in runs):
            return None
        arrived = [batch for r in runs for value in airflow.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = 'what_arrived' AND "
            "key = 'return_value'", downstream, r["run_id"]) for batch in json.loads(value["value"])]
        return (runs, arrived) if len(arrived) >= len(batches) else None

    runs, arrived = airflow.wait_for("the downstream example DAG's runs", downstream_done, timeout=300)
    assert {(r["run_type"], r["state"]) for r in runs} == {("asset_triggered", "success")}, runs
    assert sorted((b["batch_id"], b["kind"], b["table"], b["records"], b["dead_letters"],
                   tuple((r["partition"], r["start"], r["end"], r["records"]) for r in b["ranges"]))
                  for b in arrived) == sorted(
        (batches[run_id], "backfill", table, sum(end - start for _, start, end in ranges), 0,
         tuple(sorted((p, start, end, end - start) for p, start, end in ranges)))
        for run_id, ranges in by_run.items())
    assert all(isinstance(b["delta_version"], int) for b in arrived), arrived



def test_the_tidemark_page_on_the_api_server_needs_a_login_and_shows_what_the_cli_shows(running_airflow,
                                                                                          pipeline_name):
    """The plugin's page, mounted by the real api-server (tidemark_airflow.plugin): 401 without a login,
    403 with a forged token, and for a logged-in user (a viewer) the same numbers as the CLI."""
    import httpx

    airflow, _ = running_airflow
    from kafka.errors import TopicAlreadyExistsError

    with contextlib.suppress(TopicAlreadyExistsError):  # the backfill test made it, when it ran first
        helpers.create_topic(pipeline_name, partitions=2, configs={"retention.ms": "-1"})
    api = f"{airflow.url}/tidemark/api/pipelines/{pipeline_name}"
    assert httpx.get(f"{api}/offsets", timeout=30).status_code == 401
    assert httpx.get(f"{airflow.url}/tidemark/", timeout=30).status_code == 401
    assert httpx.get(f"{api}/offsets", headers={"Authorization": "Bearer forged"}, timeout=30).status_code == 403

    login = httpx.post(f"{airflow.url}/auth/token", json={"username": LOGIN[0], "password": LOGIN[1]}, timeout=30)
    assert login.status_code == 201, login.text
    token = login.json()["access_token"]
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        assert client.get(f"{api}/offsets").json() == airflow.tidemark("offsets", "show", pipeline_name)
        assert client.get(f"{api}/history").json() == airflow.tidemark("offsets", "history", pipeline_name)
        [view] = [p for p in client.get(f"{airflow.url}/tidemark/api/pipelines").json()["pipelines"]
                  if p["pipeline"] == pipeline_name]
        assert view["kafka_error"] is None and view["dag_id"] == f"tidemark_ingest__{pipeline_name}"
        [plugin] = [p for p in client.get(f"{airflow.url}/api/v2/plugins").json()["plugins"] if p["name"] == "tidemark"]
        assert {(v["destination"], v["href"]) for v in plugin["external_views"]} == {
            ("nav", "/tidemark/"), ("dag", "/tidemark/dags/{DAG_ID}")}
    # The UI's iframe sends the login cookie, not a header.
    page = httpx.get(f"{airflow.url}/tidemark/pipelines/{pipeline_name}", cookies={"_token": token}, timeout=30)
    assert page.status_code == 200 and f'data-topic="{pipeline_name}"' in page.text


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
