"""A `make airflow` stack for the benchmarks: `scripts/airflow.sh up` (api-server, scheduler with the
LocalExecutor, dag-processor and triggerer on a private PostgreSQL) as users get it, against the
benchmark's broker, lake and pipelines folder, driven through its REST API. Used by the DAG under a
running scheduler (bench/scheduler.py) and the fleet (bench/fleet.py)."""

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

from bench.knobs import ROOT, BenchSettings
from devkit import localstack

log = logging.getLogger("bench")
SCRIPT = ROOT / "scripts" / "airflow.sh"
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
"""The services `scripts/airflow.sh up` starts with the LocalExecutor, each with a pid file."""


def seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return round((dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds(), 3)


def epoch(stamp: str | None) -> float | None:
    """An Airflow API time (ISO 8601 with its zone) as epoch seconds."""
    return None if not stamp else dt.datetime.fromisoformat(stamp).timestamp()


class Airflow:
    """A running `scripts/airflow.sh` Airflow and its REST API. HOME is its AIRFLOW_LOCAL_HOME (default:
    the work folder's airflow-scheduler), AIRFLOW_PORT and PG_PORT its ports (default: free ones), ENV
    more variables for its services (e.g. AIRFLOW_CONN_SPARK_DEFAULT: the Spark connection).

    The batches run on the Spark connection the part passes, spark-submit on the benchmark's master unless it
    passes another: LAUNCHER=submit, because `up` takes a spark-submit connection equal to its own default for no
    choice and starts the warm path's server (`make airflow`'s default since 2026-11-28)."""

    def __init__(self, settings: BenchSettings, home: Path | None = None, airflow_port: int | None = None,
                 pg_port: int | None = None, **env: str) -> None:
        self.home = home or settings.work / "airflow-scheduler"
        shutil.rmtree(self.home, ignore_errors=True)
        # PostgreSQL runs as 'nobody' under root: a folder every user can reach (not under a private checkout).
        self.pg_home = Path(tempfile.mkdtemp(prefix="tidemark-bench-postgres-"))
        self.pg_home.chmod(0o755)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TIDEMARK_"))}
        free = localstack.free_ports(2)
        self.env.update(AIRFLOW_LOCAL_HOME=str(self.home), PG_HOME=str(self.pg_home),
                        AIRFLOW_PORT=str(airflow_port or free[0]),
                        PG_PORT=str(pg_port or free[1]), KAFKA_PORT=str(settings.kafka_port),
                        TIDEMARK_LAKE_ROOT=str(settings.lake), TIDEMARK_PIPELINES_DIR=str(settings.pipelines),
                        AIRFLOW_CONN_SPARK_DEFAULT=f'{{"conn_type": "spark", "host": "{settings.master}"}}',
                        AIRFLOW_USER="bench", LAUNCHER="submit")
        self.env.update(env)
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

    def service_pids(self) -> dict[str, int]:
        """The pid of each Airflow service and of its PostgreSQL's postmaster (the roots of their trees)."""
        pids = {name: int((self.home / "pids" / f"{name}.pid").read_text()) for name in SERVICES}
        pids["postgres"] = int((self.pg_home / "data" / "postmaster.pid").read_text().split()[0])
        return pids

    def wait_for_dags(self, dag_ids: list[str], timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while True:
            known: set[str] = set()
            while True:  # the API returns at most 100 a page ([api] maximum_page_limit)
                page = self.api("GET", "/dags", params={"limit": 100, "offset": len(known)})["dags"]
                known |= {d["dag_id"] for d in page}
                if len(page) < 100:
                    break
            if set(dag_ids) <= known:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the dag-processor did not parse {sorted(set(dag_ids) - known)} in {timeout:.0f} s")
            time.sleep(1)

    def trigger(self, dag_id: str) -> dict:
        """A manual run of DAG_ID, now (the run as the API returns it: run id, state)."""
        return self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None})

    def runs(self, dag_ids: list[str]) -> list[dict]:
        """Every run of DAG_IDS (one list call per 100 runs, not one call per DAG)."""
        found: list[dict] = []
        while True:
            page = self.api("POST", "/dags/~/dagRuns/list",
                            json={"dag_ids": dag_ids, "page_limit": 100, "page_offset": len(found)})["dag_runs"]
            found += page
            if len(page) < 100:
                return found

    def tasks(self, dag_id: str, run_id: str) -> list[dict]:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]

    def run_dag(self, dag_id: str, timeout: float = 1800) -> dict:
        """Trigger DAG_ID now and wait for the run to end; its times and its tasks' times."""
        triggered = time.monotonic()
        run = self.trigger(dag_id)
        run_id = run["dag_run_id"]
        deadline = triggered + timeout
        while run["state"] not in ("success", "failed"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{dag_id} run {run_id} did not end in {timeout:.0f} s")
            time.sleep(0.5)
            run = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
        ended = time.monotonic()
        tasks = self.tasks(dag_id, run_id)
        if run["state"] != "success":
            states = [(t["task_id"], t["state"]) for t in tasks]
            raise RuntimeError(f"{dag_id} run {run_id} {run['state']}: tasks {states}; logs in {self.home / 'logs'}")
        return {"run_id": run_id, "state": run["state"],
                "run_seconds": seconds_between(run.get("start_date"), run.get("end_date")),
                "trigger_to_end_seconds": round(ended - triggered, 3),
                "tasks": {t["task_id"]: {"state": t["state"], "seconds": t.get("duration") and round(t["duration"], 3)}
                          for t in tasks}}
