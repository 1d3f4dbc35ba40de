"""The whole DAG under a running Airflow, as users run it: `scripts/airflow.sh up` (api-server, scheduler
with the LocalExecutor, dag-processor and triggerer on a private PostgreSQL) against the benchmark's
broker and backlog, with the default launcher (spark-submit, `local[2]`, 1g, as `make bench`'s job).

Each repetition triggers one pipeline's DAG through the REST API (one pipeline per repetition, all on
the backlog's topic, written before Airflow starts so the dag-processor has parsed them) and waits for
it: the run's wall time as Airflow records it (start to end), the time from the trigger to the end,
and every task's time. In the same repetition, before or after it (alternating), the job alone (the
`tidemark run` path: plan, then the ingest job's spark-submit) reads the same backlog on a pipeline of
its own, with the same Airflow running beside it: the ratio compares the two under the same load.
Then each DAG again with nothing new (an empty run): its task times and the JVMs started under the
scheduler's process tree (sampled every 0.1 s), which must be none.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench import contenders, stack
from bench.measure import TreeSampler
from bench.settings import ROOT, BenchSettings
from devkit import localstack

log = logging.getLogger("bench")
SCRIPT = ROOT / "scripts" / "airflow.sh"


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return round((dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds(), 3)


class Airflow:
    """A running `scripts/airflow.sh` Airflow and its REST API."""

    def __init__(self, settings: BenchSettings) -> None:
        self.home = settings.work / "airflow-scheduler"
        shutil.rmtree(self.home, ignore_errors=True)
        # PostgreSQL runs as 'nobody' under root: a folder every user can reach (not under a private checkout).
        self.pg_home = Path(tempfile.mkdtemp(prefix="tidemark-bench-postgres-"))
        self.pg_home.chmod(0o755)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TIDEMARK_"))}
        self.env.update(AIRFLOW_LOCAL_HOME=str(self.home), PG_HOME=str(self.pg_home),
                        AIRFLOW_PORT=str(localstack.free_port()), PG_PORT=str(localstack.free_port()),
                        KAFKA_PORT=str(settings.kafka_port),
                        TIDEMARK_LAKE_ROOT=str(settings.lake), TIDEMARK_PIPELINES_DIR=str(settings.pipelines),
                        AIRFLOW_CONN_SPARK_DEFAULT=f'{{"conn_type": "spark", "host": "{settings.master}"}}',
                        AIRFLOW_USER="bench")
        self.url = self.user = self.password = ""
        self.token: str | None = None

    def __enter__(self) -> Airflow:
        started = time.monotonic()
        up = subprocess.run([str(SCRIPT), "up"], env=self.env, capture_output=True, text=True, timeout=600)
        if up.returncode != 0:
            self.__exit__()
            raise RuntimeError(f"scripts/airflow.sh up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
        self.url = re.search(r"UI:\s+(\S+)", up.stdout).group(1)
        self.user, self.password = re.search(r"login:\s+(\S+) / (\S+)", up.stdout).groups()
        self.up_seconds = round(time.monotonic() - started, 1)
        log.info("airflow up in %.0f s at %s", self.up_seconds, self.url)
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run([str(SCRIPT), "down"], env=self.env, capture_output=True, text=True, timeout=300)
        shutil.rmtree(self.pg_home, ignore_errors=True)

    def api(self, method: str, path: str, **kwargs):
        import httpx

        if self.token is None:
            login = httpx.post(f"{self.url}/auth/token", json={"username": self.user, "password": self.password},
                               timeout=30)
            login.raise_for_status()
            self.token = login.json()["access_token"]
        response = httpx.request(method, f"{self.url}/api/v2{path}", timeout=60,
                                 headers={"Authorization": f"Bearer {self.token}"}, **kwargs)
        if response.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:500]}")
        return response.json()

    def scheduler_pid(self) -> int:
        return int((self.home / "pids" / "scheduler.pid").read_text())

    def wait_for_dags(self, dag_ids: list[str], timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while True:
            known = {d["dag_id"] for d in self.api("GET", "/dags", params={"limit": 1000})["dags"]}
            if set(dag_ids) <= known:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the dag-processor did not parse {sorted(set(dag_ids) - known)} in {timeout:.0f} s")
            time.sleep(1)

    def run_dag(self, dag_id: str, timeout: float = 1800) -> dict:
        """Trigger DAG_ID now and wait for the run to end; its times and its tasks' times."""
        triggered = time.monotonic()
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None})
        run_id = run["dag_run_id"]
        deadline = triggered + timeout
        while run["state"] not in ("success", "failed"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{dag_id} run {run_id} did not end in {timeout:.0f} s")
            time.sleep(0.5)
            run = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
        ended = time.monotonic()
        tasks = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        if run["state"] != "success":
            states = [(t["task_id"], t["state"]) for t in tasks]
            raise RuntimeError(f"{dag_id} run {run_id} {run['state']}: tasks {states}; logs in {self.home / 'logs'}")
        return {"run_id": run_id, "state": run["state"],
                "run_seconds": _seconds(run.get("start_date"), run.get("end_date")),
                "trigger_to_end_seconds": round(ended - triggered, 3),
                "tasks": {t["task_id"]: {"state": t["state"], "seconds": t.get("duration") and round(t["duration"], 3)}
                          for t in tasks}}


def run(settings: BenchSettings, topic: str, records: int) -> dict:
    """The DAG under a running scheduler, ``settings.repeats`` times on the backlog, then empty runs."""
    configs = [stack.add_pipeline(settings, f"bench_sched_{rep}", topic) for rep in range(1, settings.repeats + 1)]
    dag_ids = [stack.dag_id(c.name) for c in configs]
    runs, empty, jobs = [], [], []
    with Airflow(settings) as airflow:
        airflow.wait_for_dags(dag_ids)
        for rep, (config, dag_id) in enumerate(zip(configs, dag_ids, strict=True), start=1):
            if rep % 2 == 0:
                jobs.append(_job_alone(settings, topic, records, rep))
            log.info("repetition %d/%d: the DAG under the scheduler ...", rep, settings.repeats)
            result = airflow.run_dag(dag_id)
            found = stack.table_count(config.table_uri)
            if found != records:
                raise RuntimeError(f"{dag_id}: the output holds {found} rows, expected {records}")
            result.update(repetition=rep, records=records,
                          records_per_second=round(records / result["run_seconds"], 1))
            runs.append(result)
            log.info("repetition %d/%d: DAG run %.1f s (trigger to end %.1f s), tasks %s", rep, settings.repeats,
                     result["run_seconds"], result["trigger_to_end_seconds"],
                     {k: v["seconds"] for k, v in result["tasks"].items()})
            sampler = TreeSampler(airflow.scheduler_pid())  # the LocalExecutor's workers and their task processes
            sampler.start()
            try:
                nothing = airflow.run_dag(dag_id)
            finally:
                sampler.stop()
            if nothing["tasks"].get("ingest", {}).get("state") != "skipped":
                raise RuntimeError(f"{dag_id}: the empty run's ingest task was {nothing['tasks'].get('ingest')}")
            nothing.update(repetition=rep, jvms_started=len(sampler.jvm_pids),
                           task_seconds=round(sum(t["seconds"] or 0 for t in nothing["tasks"].values()), 3))
            empty.append(nothing)
            log.info("repetition %d/%d: empty run %.1f s, task time %.1f s, %d JVM(s)", rep, settings.repeats,
                     nothing["run_seconds"], nothing["task_seconds"], nothing["jvms_started"])
            stack.remove_pipeline(settings, config)
            if rep % 2:
                jobs.append(_job_alone(settings, topic, records, rep))
        up_seconds = airflow.up_seconds
    return {"executor": "LocalExecutor", "database": "PostgreSQL", "airflow_up_seconds": up_seconds,
            "launcher": f"spark-submit, {settings.master}, driver memory {settings.driver_memory}",
            "runs": runs, "empty_runs": empty, "job_alone": jobs}


def _job_alone(settings: BenchSettings, topic: str, records: int, rep: int) -> dict:
    log.info("repetition %d/%d: the job alone, Airflow running beside it ...", rep, settings.repeats)
    result = contenders.tidemark_job(settings, topic, records, rep, name="bench_sched_job")
    log.info("repetition %d/%d: the job alone: %.1f s", rep, settings.repeats, result.seconds)
    return {"repetition": rep, "seconds": round(result.seconds, 3), "plan_seconds": result.extra["plan_seconds"],
            **result.measurement.summary()}
