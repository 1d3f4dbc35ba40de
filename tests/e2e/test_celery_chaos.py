"""`make airflow EXECUTOR=celery` (scripts/airflow.sh, scripts/redis.sh) and chaos on it: the stack with the
CeleryExecutor, Redis as Celery's broker and two Celery workers, each with its own folder and AIRFLOW_HOME
(task logs, temporary files), sharing nothing but PostgreSQL, Kafka and the lake (the run's local S3 server).

Started once for the module, with the ingest jobs on the warm path (the run's Spark Connect server). A worker
to be hit mid-task runs with ``TIDEMARK_PAUSE_AT`` (tidemark.fault_injection) in its environment: its ingest job stops
itself (SIGSTOP) at that point, so the fault lands there every time. `up` starts both workers with the first
test's point (only an ingest job reads it), so that test restarts no worker for it (a Celery worker's start
costs seconds of CPU); a test that needs workers without a pause gets them (``CeleryAirflow.without_pauses``,
which restarts nothing when the tests run in order) and any test can run alone.

- A worker killed -9 (its whole process tree, as when its host dies) while its ingest job is stopped after
  the dead letters: the scheduler finds the task without a heartbeat and retries it; the retry runs on the
  other worker, whose folder the plan task never wrote to, and commits the batch once.
- The S3 server restarted during the output commit and again during the ledger commit of one batch. The
  lake's server (moto) keeps its objects in memory, so a real restart would empty the lake, which no real
  S3 does: the restart is modelled by devkit.faults.S3Gate, a gate in front of the server that the
  pipeline's storage connection points at. At each commit's PUT it lets the request through, drops the
  connection before the answer (the server died after writing, before answering: the client cannot know
  whether it committed) and resets the next connections, then answers again with the data intact. The
  output commit of the warm path happens in the shared Spark Connect server, which the gate cannot front:
  this pipeline submits its job with spark-submit on a local master, whose S3A client (the output commit)
  and delta-rs (the ledger commit) both go through the gate.
- A Kafka broker killed -9 (the leader of a partition, on the run's three-broker cluster; topic of 3
  replicas) as the plan commits the frozen batch to the ledger (the gate holds that request while the
  broker dies): the plan has asked for the offsets, the job reads from the new leader, the batch commits once.
- PostgreSQL (the metadata DB) restarted while a run's ingest job is stopped after its output commit: the
  run goes on (or fails), the ledger stays right, and the next run is exactly once. Last: its worker keeps
  the pause (the next run's job is let go when it stops), and a restart that stopped services affects no
  other test.

Exactly once is read from the output table (delta-rs) and compared with what was produced; which worker ran
which task is read from the workers' own log folders and printed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import uuid
from collections import Counter
from pathlib import Path

import psutil
import pytest
import yaml

from devkit.faults import S3Gate, session_processes
from tests import helpers
from tests.e2e import airflow_stack
from tests.e2e.airflow_stack import AirflowStack
from tests.e2e.conftest import ROOT
from tidemark import fault_injection, storage

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCRIPT = ROOT / "scripts" / "airflow.sh"
WORKERS = (1, 2)
# The scheduler fails a task whose supervisor has not heartbeaten for this long (Airflow's default: 300 s).
HEARTBEAT_TIMEOUT_S = 30
# The S3 server stays away for this many connection attempts after the commit request it died on.
S3_DOWN_FOR = 6


class CeleryAirflow(AirflowStack):
    """The running stack: its REST API, its scripts and its two Celery workers' folders and processes.
    ``running`` is what each running worker was started with as TIDEMARK_PAUSE_AT ("": none), as the test
    started and stopped them."""

    def __init__(self, env: dict[str, str], home: Path, url: str, login: tuple[str, str], lake: str,
                 pipelines: dict[str, str], running: dict[int, str]):
        super().__init__(env, home, url, *login)
        self.lake, self.pipelines, self.running = lake, pipelines, running

    def script(self, *args: str, **extra: str) -> str:
        result = subprocess.run([str(SCRIPT), *args], env={"SPARK_HOME": airflow_stack.SPARK_HOME, **self.env,
                                                           **extra}, capture_output=True, text=True, timeout=400)
        assert result.returncode == 0, \
            f"airflow.sh {' '.join(args)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        return result.stdout

    def up(self) -> None:
        """`up` again: it starts whatever stopped, a Celery worker that is not running without a pause."""
        try:
            self.script("up")
        finally:  # a failed `up` may have started some of them
            for worker in WORKERS:
                self.running.setdefault(worker, "")

    def run_worker(self, worker: int, pause: str = "") -> None:
        """The worker running with ``pause`` as its TIDEMARK_PAUSE_AT ("": none; `worker-up` passes the
        caller's environment to that worker only): left as it is if it already runs with it, else (re)started."""
        if self.running.get(worker) == pause:
            return
        self.worker_down(worker)
        self.script("worker-up", str(worker), **({"TIDEMARK_PAUSE_AT": pause} if pause else {}))
        self.running[worker] = pause

    def worker_down(self, worker: int) -> None:
        """`worker-down` (a no-op for a worker that is not running)."""
        self.script("worker-down", str(worker))
        self.running.pop(worker, None)

    def without_pauses(self) -> None:
        """No running worker with a pause, and at least one running: what a test whose runs must go through
        needs. Restarts nothing after the tests before it, in the module's order."""
        for worker, pause in list(self.running.items()):
            if pause:
                self.run_worker(worker)
        if not self.running:
            self.run_worker(WORKERS[0])

    def continue_job(self, worker: int) -> None:
        """SIGCONT to the worker's ingest job (its process group) if it has stopped itself at TIDEMARK_PAUSE_AT."""
        if (job := self.stopped_job(worker)) is not None:
            os.killpg(os.getpgid(job.pid), signal.SIGCONT)

    def logs(self) -> str:
        """The end of every service's and worker's log: what a failed wait shows."""
        files = [*sorted((self.home / "logs" / "services").glob("*.log")),
                 *(self.worker_home(i) / "worker.log" for i in WORKERS)]
        return "\n".join(f"--- {p}\n{p.read_text()[-1500:]}" for p in files if p.exists())

    def wait_for(self, what: str, check, timeout: float = 300):
        return helpers.wait_until(check, timeout, lambda: f"{what}\n{self.logs()}", interval=1)

    def trigger(self, pipeline: str) -> str:
        dag_id = f"tidemark_ingest__{pipeline}"
        self.wait_for(f"the DAG {dag_id} parsed", lambda: self.api("GET", f"/dags/{dag_id}"))
        return self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None})["dag_run_id"]

    def finished_run(self, pipeline: str, run_id: str, timeout: float = 400, let_go: int | None = None) -> dict:
        """The run once it has ended; with ``let_go``, that worker's ingest job is let go whenever it stops
        itself (a worker still started with a pause, for a run that needs no fault)."""
        def done():
            if let_go is not None:
                self.continue_job(let_go)
            run = self.api("GET", f"/dags/tidemark_ingest__{pipeline}/dagRuns/{run_id}")
            return run if run["state"] in ("success", "failed") else None
        return self.wait_for(f"run {run_id} of {pipeline} to finish", done, timeout)

    def stopped_services(self) -> list[str]:
        """The stack's services (api-server, scheduler, dag-processor, triggerer) whose processes are gone."""
        stopped = []
        for pidfile in sorted((self.home / "pids").glob("*.pid")):
            try:
                os.killpg(int(pidfile.read_text()), 0)
            except (ProcessLookupError, ValueError):
                stopped.append(pidfile.stem)
        return stopped

    def worker_home(self, worker: int) -> Path:
        return self.home / "workers" / f"worker-{worker}"

    def ran_on(self, pipeline: str, run_id: str, task: str, attempt: int) -> list[str]:
        """The workers whose own log folder holds this attempt's task log: the worker that ran it."""
        relative = Path(f"dag_id=tidemark_ingest__{pipeline}", f"run_id={run_id}", f"task_id={task}",
                        f"attempt={attempt}.log")
        return [f"worker-{i}" for i in WORKERS if (self.worker_home(i) / "logs" / relative).exists()]

    def processes(self, worker: int) -> list[psutil.Process]:
        """Every process of the worker's session: the Celery worker, its pool, task supervisors, tasks, jobs."""
        return session_processes(self.worker_home(worker) / "worker.pid")

    def stopped_job(self, worker: int) -> psutil.Process | None:
        """The worker's ingest job once it has stopped itself at TIDEMARK_PAUSE_AT."""
        for process in self.processes(worker):
            try:
                if any(a.endswith("ingest.py") for a in process.cmdline()) and \
                        process.status() == psutil.STATUS_STOPPED:
                    return process
            except psutil.NoSuchProcess:
                pass
        return None

    def kill_worker(self, worker: int) -> None:
        """kill -9 of the worker's every process, as if its host died: no warm shutdown, no task requeued."""
        def gone():
            for process in self.processes(worker):
                try:
                    process.kill()
                except psutil.NoSuchProcess:
                    pass
            return not self.processes(worker)
        helpers.wait_until(gone, 30, f"the processes of Celery worker {worker} to die")
        self.running.pop(worker, None)


def exactly_once(airflow: CeleryAirflow, pipeline: str, produced: Counter) -> dict:
    """Records, duplicates and missing ones in the output table against what was produced; and the ledger."""
    rows = helpers.query(storage.delta_rs_uri(f"{airflow.lake}/{pipeline}"),
                         "SELECT kafka_partition AS p, COUNT(*) AS n, COUNT(DISTINCT kafka_offset) AS d, "
                         "MIN(kafka_offset) AS lo, MAX(kafka_offset) AS hi FROM t GROUP BY kafka_partition")
    records = sum(r["n"] for r in rows)
    duplicates = sum(r["n"] - r["d"] for r in rows)
    found = {r["p"]: r["d"] for r in rows if r["lo"] == 0 and r["hi"] == r["d"] - 1}  # offsets 0..d-1, no hole
    missing = sum(n - found.get(p, 0) for p, n in produced.items())
    committed = {o["partition"]: o["committed_offset"]
                 for o in airflow.tidemark("offsets", "show", pipeline)}
    return {"records": records, "duplicates": duplicates, "missing": missing, "committed": committed}


def write_pipeline(folder: Path, name: str, retries: int, **extra) -> None:
    if "kafka_conn_id" not in extra:
        helpers.create_topic(name, partitions=2)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({
        "name": name, "topics": [name], "table": name, "schedule": None, "retries": retries,
        "retry_delay_seconds": 1, **extra}))


@pytest.fixture(scope="module")
def s3_gate():
    """The gate in front of the run's S3 server that the S3 chaos pipelines' storage connection uses."""
    with S3Gate() as gate:
        yield gate


@pytest.fixture(scope="module")
def celery_airflow(tmp_path_factory, kafka_bootstrap, spark_connect, s3_gate, kafka_cluster_session):
    base = tmp_path_factory.mktemp("celery_airflow")
    pipelines, home = base / "pipelines", base / "home"
    pipelines.mkdir()
    suffix = uuid.uuid4().hex[:8]
    names = {"kill": f"cel_kill_{suffix}", "pg": f"cel_pg_{suffix}", "s3": f"cel_s3_{suffix}",
             "broker": f"cel_broker_{suffix}"}
    for case, name in names.items():
        extra = {}
        if case == "s3":
            extra.update(storage_conn_id="aws_gate", spark_conn_id="spark_local",
                         spark_conf={"spark.sql.shuffle.partitions": "1"})
        if case == "broker":  # its topic is made on the cluster by the test
            extra.update(kafka_conn_id="kafka_cluster", storage_conn_id="aws_gate")
        write_pipeline(pipelines, name, retries=0 if case == "pg" else 1, **extra)
    lake = helpers.s3_lake(f"celery-{suffix}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TIDEMARK_"))}
    # PostgreSQL runs as 'nobody' when the tests run as root: a folder every user can traverse
    pg_home = Path(tempfile.mkdtemp(prefix=f"tidemark-postgres-{suffix}-"))
    pg_home.chmod(0o755)
    # the workers' log servers take CELERY_LOG_PORT and the ports after it, one each
    airflow_port, pg_port, redis_port, log_port = helpers.free_port_blocks(1, 1, 1, len(WORKERS))
    env.update(EXECUTOR="celery", AIRFLOW_LOCAL_HOME=str(home), PG_HOME=str(pg_home),
               AIRFLOW_PORT=str(airflow_port), PG_PORT=str(pg_port),
               REDIS_PORT=str(redis_port), CELERY_LOG_PORT=str(log_port),
               KAFKA_PORT=os.environ["KAFKA_PORT"], TIDEMARK_LAKE_ROOT=lake, TIDEMARK_PIPELINES_DIR=str(pipelines),
               TIDEMARK_JAR_CACHE=os.environ.get("TIDEMARK_JAR_CACHE", str(ROOT / ".cache" / "jars")),
               AIRFLOW_CONN_SPARK_DEFAULT=helpers.spark_connect_connection(spark_connect),
               AIRFLOW_CONN_AWS_DEFAULT=helpers.aws_connection(),
               AIRFLOW_CONN_AWS_GATE=_through(helpers.aws_connection(), s3_gate),
               AIRFLOW_CONN_SPARK_LOCAL=json.dumps({"conn_type": "spark", "host": "local[1]"}),
               AIRFLOW_CONN_KAFKA_CLUSTER=json.dumps({"conn_type": "kafka", "extra": {
                   "bootstrap.servers": kafka_cluster_session.bootstrap("plaintext")}}),
               AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT=str(HEARTBEAT_TIMEOUT_S),
               AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL="5",
               **airflow_stack.TEST_SETTINGS)
    # `up` starts both workers with the first test's pause (the module's docstring says why); the environment
    # of every later call has none.
    first_pause = fault_injection.AFTER_DEAD_LETTERS
    with airflow_stack.started(SCRIPT, {**env, "TIDEMARK_PAUSE_AT": first_pause}, home, pg_home,
                               timeout=600) as (_, url, user, password):
        yield CeleryAirflow(env, home, url, (user, password), lake, names, {i: first_pause for i in WORKERS})


def _through(connection: str, gate: S3Gate) -> str:
    """The aws connection with the gate as its endpoint."""
    conn = json.loads(connection)
    conn["extra"]["endpoint_url"] = gate.endpoint
    return json.dumps(conn)


def run_on_workers(airflow: CeleryAirflow, pipeline: str, run_id: str, attempts: dict[str, int]) -> dict[str, list]:
    """Which worker ran each attempt of the run's tasks (printed: the module's log says it)."""
    where = {f"{task}#{attempt}": airflow.ran_on(pipeline, run_id, task, attempt)
             for task, last in attempts.items() for attempt in range(1, last + 1)}
    print(f"{pipeline} {run_id}: " + ", ".join(f"{key} on {', '.join(w) or 'no worker'}" for key, w in where.items()))
    return where


def tries(airflow: CeleryAirflow, pipeline: str, run_id: str) -> dict[str, int]:
    instances = airflow.api("GET", f"/dags/tidemark_ingest__{pipeline}/dagRuns/{run_id}/taskInstances")
    return {t["task_id"]: t["try_number"] for t in instances["task_instances"]}


def test_a_worker_killed_mid_ingest_its_task_is_retried_on_the_other_worker_and_commits_once(celery_airflow):
    airflow = celery_airflow
    status = airflow.script("status")
    assert all(f"celery worker-{i}: running" in status for i in WORKERS) and "redis: running" in status, status
    assert airflow.shell("airflow config get-value core executor").strip() == "CeleryExecutor"
    for i in WORKERS:  # each worker's own home and temporary folder
        settings = (airflow.worker_home(i) / "env.sh").read_text()
        assert f'export AIRFLOW_HOME="{airflow.worker_home(i)}"' in settings
        assert f'export TMPDIR="{airflow.worker_home(i)}/tmp"' in settings
    pipeline = airflow.pipelines["kill"]
    produced = helpers.produce(pipeline, 300)
    # Worker 1 alone takes the run's tasks; its ingest job stops itself after the dead letters (the pause
    # `up` started it with: no restart).
    airflow.worker_down(2)
    airflow.run_worker(1, fault_injection.AFTER_DEAD_LETTERS)
    run_id = airflow.trigger(pipeline)
    airflow.wait_for("worker 1's ingest job stopped at after_dead_letters", lambda: airflow.stopped_job(1))
    airflow.run_worker(2)  # without the pause
    airflow.kill_worker(1)  # its host dies: the Celery worker, the task's supervisor, the task and the job
    run = airflow.finished_run(pipeline, run_id, timeout=HEARTBEAT_TIMEOUT_S + 300)
    assert run["state"] == "success", f"{run}\n{airflow.logs()}"
    assert tries(airflow, pipeline, run_id) == {"plan": 1, "ingest": 2}
    # The plan and the first try on worker 1, the retry on worker 2: nothing written by a task on one
    # worker's disk was there for the next.
    assert run_on_workers(airflow, pipeline, run_id, {"plan": 1, "ingest": 2}) == {
        "plan#1": ["worker-1"], "ingest#1": ["worker-1"], "ingest#2": ["worker-2"]}
    counts = exactly_once(airflow, pipeline, produced)
    print(f"worker killed -9 during ingest: {counts}")
    assert counts == {"records": 300, "duplicates": 0, "missing": 0, "committed": helpers.end_offsets(pipeline)}
    history = airflow.tidemark("offsets", "history", pipeline)
    assert {(r["batch_id"], r["status"], r["dag_run_id"]) for r in history} == {(1, "committed", run_id)}


def assert_ledger_matches_output(airflow: CeleryAirflow, pipeline: str, produced: Counter, run_id: str) -> None:
    """One committed batch whose ranges are what was produced, every record of them in the output once
    (records and distinct offsets per partition, from offset 0 without a hole), and `tidemark audit` finding
    nothing wrong."""
    rows = helpers.query(storage.delta_rs_uri(f"{airflow.lake}/{pipeline}"),
                         "SELECT kafka_partition AS p, COUNT(*) AS n, COUNT(DISTINCT kafka_offset) AS d, "
                         "MIN(kafka_offset) AS lo, MAX(kafka_offset) AS hi FROM t GROUP BY kafka_partition")
    print(f"{pipeline}: {rows}")
    assert {r["p"]: (r["n"], r["d"], r["lo"], r["hi"]) for r in rows} == {
        p: (n, n, 0, n - 1) for p, n in produced.items()}
    history = airflow.tidemark("offsets", "history", pipeline)
    assert {(r["batch_id"], r["status"], r["dag_run_id"], r["partition"], r["start_offset"], r["end_offset"],
             r["record_count"]) for r in history} == {
        (1, "committed", run_id, p, 0, n, n) for p, n in produced.items()}, history
    audit = airflow.tidemark("audit", pipeline)
    assert audit["ok"], audit


def test_the_s3_server_restarted_during_the_output_commit_and_the_ledger_commit_the_batch_commits_once(
        celery_airflow, s3_gate):
    airflow, gate = celery_airflow, s3_gate
    airflow.without_pauses()
    pipeline = airflow.pipelines["s3"]
    produced = helpers.produce(pipeline, 200)
    # The gate watches, in this order, for the output table's commit (S3A, from the ingest job's driver; the
    # plan writes nothing there) and for the next ledger commit after it (delta-rs, from the job): each
    # meets a restart. No pause needed: the trips land on the requests themselves, on whichever worker.
    before, refused = len(gate.tripped), gate.refused
    gate.trip_on(rf"^PUT /lake/.*/{pipeline}/_delta_log/\d{{20}}\.json$", lose="response", down_for=S3_DOWN_FOR)
    gate.trip_on(r"^PUT /lake/.*/_tidemark/offsets/_delta_log/\d{20}\.json$", lose="response",
                 down_for=S3_DOWN_FOR)
    run_id = airflow.trigger(pipeline)
    run = airflow.finished_run(pipeline, run_id)
    attempts = tries(airflow, pipeline, run_id)
    print(f"S3 restarted during the output commit and the ledger commit: {gate.tripped[before:]}, "
          f"{gate.refused - refused} connections refused, run {run['state']}, tries {attempts}")
    assert [re.sub(r"^.*/(\w+)/_delta_log/.*$", r"\1", line) for line in gate.tripped[before:]] == \
        [pipeline, "offsets"] and not gate.is_down, (gate.tripped, gate.is_down)
    assert run["state"] == "success", f"{run}\n{airflow.logs()}"
    run_on_workers(airflow, pipeline, run_id, attempts)
    assert_ledger_matches_output(airflow, pipeline, produced, run_id)


def test_a_kafka_broker_killed_as_the_plan_freezes_the_batch_the_batch_is_read_from_the_new_leader_once(
        celery_airflow, s3_gate, kafka_cluster):
    airflow, gate = celery_airflow, s3_gate
    airflow.without_pauses()
    pipeline = airflow.pipelines["broker"]
    kafka_cluster.create_topic(pipeline, partitions=2)
    kafka_cluster.produce(pipeline, 200)
    produced = Counter({0: 100, 1: 100})
    killed: list[int] = []

    def kill_the_leader() -> None:
        killed.append(kafka_cluster.leader(pipeline, 0))
        kafka_cluster.kill_broker(killed[0])

    with kafka_cluster.alone():
        # The plan's ledger commit of the frozen batch (through the gate) waits while the partition's leader
        # is killed -9: the plan has asked Kafka for its offsets, the ingest job has not read yet.
        before = len(gate.tripped)
        gate.on_request(r"^PUT /lake/.*/_tidemark/offsets/_delta_log/\d{20}\.json$", kill_the_leader)
        run_id = airflow.trigger(pipeline)
        run = airflow.finished_run(pipeline, run_id)
        print(f"broker {killed} (leader of {pipeline}-0) killed -9 at {gate.tripped[before:]}: run {run['state']}, "
              f"tries {tries(airflow, pipeline, run_id)}, partition 0 now led by {kafka_cluster.leader(pipeline, 0)}")
    assert len(killed) == 1 and not gate.errors, (killed, gate.errors)
    assert run["state"] == "success", f"{run}\n{airflow.logs()}"
    run_on_workers(airflow, pipeline, run_id, tries(airflow, pipeline, run_id))
    assert_ledger_matches_output(airflow, pipeline, produced, run_id)


def test_the_metadata_db_restarted_during_a_run_leaves_the_ledger_right(celery_airflow):
    """Last in the module: see the module's docstring."""
    airflow = celery_airflow
    pipeline = airflow.pipelines["pg"]
    produced = helpers.produce(pipeline, 200)
    # Worker 2 alone takes the run (worker 1 was killed by the first test), its job stopping after the output
    # commit.
    airflow.worker_down(1)
    airflow.run_worker(2, fault_injection.AFTER_OUTPUT_COMMIT)
    first = airflow.trigger(pipeline)
    job = airflow.wait_for("worker 2's ingest job stopped at after_output_commit", lambda: airflow.stopped_job(2))
    restart = f"{ROOT}/scripts/postgres.sh down && {ROOT}/scripts/postgres.sh up"
    airflow.shell(restart)
    os.killpg(os.getpgid(job.pid), signal.SIGCONT)
    # Airflow's services may exit on a refused DB connection (a service manager restarts them in production):
    # `up` again starts what stopped, as the runbook says, until the run ends.
    # An `up` may itself fail while PostgreSQL refuses connections (seen: "the database system is shutting
    # down" a while after the restart); the next poll runs it again, as an operator would.
    revived: set[str] = set()
    failed_ups: list[str] = []

    def finished_or_revived():
        if stopped := airflow.stopped_services():
            revived.update(stopped)
            try:
                airflow.up()
            except AssertionError as exc:
                failed_ups.append(str(exc).splitlines()[-1])
        run = airflow.api("GET", f"/dags/tidemark_ingest__{pipeline}/dagRuns/{first}")
        return run if run["state"] in ("success", "failed") else None
    run = airflow.wait_for(f"run {first} to finish across the PostgreSQL restart", finished_or_revived, 400)
    print(f"the run across the PostgreSQL restart: {run['state']}, tries {tries(airflow, pipeline, first)}, "
          f"services started again: {sorted(revived) or 'none'}, `up` failed {len(failed_ups)} time(s): {failed_ups}")
    if airflow.stopped_services():  # the whole stack again for the next run
        airflow.up()
    run_on_workers(airflow, pipeline, first, {"plan": 1, "ingest": 1})
    # Whichever way the run ended, batch 1 holds its frozen ranges in the ledger and is in the output once.
    batch = {(r["partition"], r["start_offset"], r["end_offset"]) for r in airflow.tidemark("offsets", "history",
                                                                                           pipeline)}
    assert batch == {(0, 0, 100), (1, 0, 100)}, batch
    counts = exactly_once(airflow, pipeline, produced)
    assert (counts["records"], counts["duplicates"], counts["missing"]) == (200, 0, 0), counts
    # The next run, after more records, with no fault: worker 2 keeps its pause (starting a worker without it
    # would cost a Celery worker's start), and its job is let go at once when it stops after the output commit.
    produced.update(helpers.produce(pipeline, 50, start=200))
    second = airflow.trigger(pipeline)
    assert airflow.finished_run(pipeline, second, let_go=2)["state"] == "success", airflow.logs()
    run_on_workers(airflow, pipeline, second, {"plan": 1, "ingest": 1})
    counts = exactly_once(airflow, pipeline, produced)
    print(f"PostgreSQL restarted during a run: {counts}")
    assert counts == {"records": 250, "duplicates": 0, "missing": 0, "committed": helpers.end_offsets(pipeline)}
    history = sorted(airflow.tidemark("offsets", "history", pipeline), key=lambda r: (r["batch_id"], r["partition"]))
    assert {r["status"] for r in history} == {"committed"}
    ends = {}
    for row in history:  # contiguous per partition
        assert row["start_offset"] == ends.get(row["partition"], 0), history
        ends[row["partition"]] = row["end_offset"]
