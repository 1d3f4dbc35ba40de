"""The soak's stack and its controls: the Airflow REST API of `scripts/airflow.sh` (CeleryExecutor, two
workers), the service scripts (PostgreSQL, Kafka, the Spark standalone cluster) and the S3 proxy
(bench/chaos/proxy.py). Every setting comes from the environment scripts/chaos.sh exports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from devkit.faults import session_processes

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
HOME = Path(os.environ.get("CHAOS_HOME", ROOT / ".cache" / "chaos"))
AIRFLOW_HOME = Path(os.environ.get("AIRFLOW_LOCAL_HOME", HOME / "airflow"))
SPARK_HOME_DIR = Path(os.environ.get("SPARK_CLUSTER_HOME", HOME / "spark"))
WORKERS = (1, 2)
SPARK_WORKERS = (0, 1)
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")


def log(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)


def script(*args: str, timeout: float = 600, check: bool = True, **extra: str) -> str:
    """A service script (``airflow.sh up``, ``postgres.sh down`` ...) with the soak's environment."""
    result = subprocess.run([str(SCRIPTS / args[0]), *args[1:]], env={**os.environ, **extra}, capture_output=True,
                            text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"scripts/{' '.join(args)} failed (exit {result.returncode}):\n"
                           f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result.stdout


# One change to the stack's processes at a time: a worker restarted in the background and `airflow.sh up`
# after a PostgreSQL restart must not both launch the same worker.
control = threading.Lock()


class Airflow:
    """The stack's REST API as its admin login; calls are tried again while the api-server is away (a
    PostgreSQL restart may stop it: `revive` starts again what stopped, as the runbook says)."""

    def __init__(self) -> None:
        self.url = f"http://127.0.0.1:{os.environ['AIRFLOW_PORT']}"
        self.user = os.environ.get("AIRFLOW_USER", "admin")
        self.token: str | None = None

    def _password(self) -> str:
        return json.loads((AIRFLOW_HOME / "passwords.json").read_text())[self.user]

    def api(self, method: str, path: str, timeout: float = 300, **kwargs):
        import httpx

        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.token is None:
                    login = httpx.post(f"{self.url}/auth/token", timeout=30,
                                       json={"username": self.user, "password": self._password()})
                    login.raise_for_status()
                    self.token = login.json()["access_token"]
                response = httpx.request(method, f"{self.url}/api/v2{path}", timeout=30,
                                         headers={"Authorization": f"Bearer {self.token}"}, **kwargs)
                if response.status_code == 401:
                    self.token = None
                response.raise_for_status()
                return response.json()
            except Exception as exc:  # the api-server restarting, the metadata DB away: try again
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Airflow REST API {method} {path} kept failing for {timeout:.0f} s: {exc}; "
                                       f"see {AIRFLOW_HOME}/logs/services") from exc
                revive()
                time.sleep(3)

    def trigger(self, pipeline: str) -> str:
        return self.api("POST", f"/dags/tidemark_ingest__{pipeline}/dagRuns",
                        json={"logical_date": None})["dag_run_id"]

    def run(self, pipeline: str, run_id: str) -> dict:
        return self.api("GET", f"/dags/tidemark_ingest__{pipeline}/dagRuns/{run_id}")

    def tasks(self, pipeline: str, run_id: str) -> dict[str, dict]:
        found = self.api("GET", f"/dags/tidemark_ingest__{pipeline}/dagRuns/{run_id}/taskInstances")
        return {t["task_id"]: t for t in found["task_instances"]}

    def wait_parsed(self, pipeline: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.api("GET", f"/dags/tidemark_ingest__{pipeline}", timeout=10)
                return
            except RuntimeError:
                time.sleep(2)
        raise RuntimeError(f"the DAG tidemark_ingest__{pipeline} was not parsed within {timeout:.0f} s; see "
                           f"{AIRFLOW_HOME}/logs/services/dag-processor.log")


def _group_alive(pidfile: Path) -> bool:
    try:
        os.killpg(int(pidfile.read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def stopped_services() -> list[str]:
    return [name for name in SERVICES if not _group_alive(AIRFLOW_HOME / "pids" / f"{name}.pid")]


def revive() -> list[str]:
    """`airflow.sh up` again if a service of the stack stopped (a PostgreSQL restart can stop them)."""
    with control:
        if stopped := stopped_services():
            log(f"services stopped: {', '.join(stopped)}; starting them again with airflow.sh up")
            kept = HOME / "stopped-services"  # `up` starts each service on a fresh log: keep the old one
            kept.mkdir(exist_ok=True)
            for name in stopped:
                old = AIRFLOW_HOME / "logs" / "services" / f"{name}.log"
                if old.exists():
                    shutil.copy(old, kept / f"{time.strftime('%H%M%S')}-{name}.log")
            script("airflow.sh", "up", check=False)
        return stopped


# --- Celery workers --------------------------------------------------------------------------------------

def worker_home(worker: int) -> Path:
    return AIRFLOW_HOME / "workers" / f"worker-{worker}"


def worker_processes(worker: int) -> list[psutil.Process]:
    """Every process of the worker's session: the Celery worker, its pool, supervisors, tasks, Spark drivers."""
    return session_processes(worker_home(worker) / "worker.pid")


def task_log(pipeline: str, run_id: str, task: str, attempt: int) -> tuple[int, Path] | None:
    """(worker, path) of the attempt's task log in a worker's own folder: the worker that runs it."""
    relative = Path(f"dag_id=tidemark_ingest__{pipeline}", f"run_id={run_id}", f"task_id={task}",
                    f"attempt={attempt}.log")
    for worker in WORKERS:
        path = worker_home(worker) / "logs" / relative
        if path.exists():
            return worker, path
    return None


def kill_worker(worker: int) -> int:
    """kill -9 of every process of the worker, as when its host dies; returns how many were killed."""
    killed = 0
    for _ in range(20):
        processes = worker_processes(worker)
        if not processes:
            break
        for process in processes:
            try:
                process.kill()
                killed += 1
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.5)
    return killed


def start_worker(worker: int) -> None:
    with control:
        script("airflow.sh", "worker-up", str(worker), check=False)


# --- Spark ------------------------------------------------------------------------------------------------

def spark_drivers(pipeline: str) -> list[psutil.Process]:
    """The spark-submit JVMs of the pipeline's ingest job (client mode: the driver runs in the task)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmd = process.info["cmdline"] or []
        if "org.apache.spark.deploy.SparkSubmit" in cmd and f"tidemark-{pipeline}" in cmd:
            found.append(process)
    return found


def spark_worker_pidfile(worker: int) -> Path:
    return SPARK_HOME_DIR / f"worker-{worker}.pid"


def kill_spark_worker(worker: int) -> bool:
    """kill -9 of the worker daemon's process group: the Worker JVM and the executors it launched."""
    try:
        os.killpg(int(spark_worker_pidfile(worker).read_text()), 9)
        return True
    except (OSError, ValueError):
        return False


def start_spark_worker(worker: int) -> None:
    """The worker again, as scripts/spark_cluster.sh starts it (same folder, pid file and UI port)."""
    directory = SPARK_HOME_DIR / f"worker-{worker}"
    ui = int(os.environ["SPARK_WORKER_WEBUI_PORT"]) + worker
    command = [f"{os.environ['SPARK_HOME']}/bin/spark-class", "org.apache.spark.deploy.worker.Worker",
               f"spark://127.0.0.1:{os.environ['SPARK_MASTER_PORT']}", "--host", "127.0.0.1",
               "--cores", os.environ.get("SPARK_WORKER_CORES", "1"),
               "--memory", os.environ.get("SPARK_WORKER_MEMORY", "1g"),
               "--work-dir", str(directory), "--webui-port", str(ui)]
    env = {**os.environ, "SPARK_WORKER_DIR": str(directory), "SPARK_DAEMON_MEMORY": "256m",
           "SPARK_CONF_DIR": str(ROOT / "plugins" / "tidemark_spark" / "conf")}
    with control, open(SPARK_HOME_DIR / f"worker-{worker}.log", "a") as out:
        process = subprocess.Popen(command, cwd=SPARK_HOME_DIR, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        spark_worker_pidfile(worker).write_text(f"{process.pid}\n")


def spark_app_progress(pipeline: str, ui_port: int) -> dict | None:
    """The pipeline's running driver's stages from its UI (``spark.ui.port`` is set per pipeline; the next
    ports are tried if it is taken): counts of active and completed stages, or None if none answers."""
    import httpx

    stages = None
    for port in range(ui_port, ui_port + 5):
        try:
            apps = httpx.get(f"http://127.0.0.1:{port}/api/v1/applications", timeout=3).json()
            if apps[0]["name"] == f"tidemark-{pipeline}":
                stages = httpx.get(f"http://127.0.0.1:{port}/api/v1/applications/{apps[0]['id']}/stages",
                                   timeout=3).json()
                break
        except Exception:
            continue
    if stages is None:
        return None
    return {"active": sum(s["status"] == "ACTIVE" for s in stages),
            "complete": sum(s["status"] == "COMPLETE" for s in stages)}


# --- S3 proxy ---------------------------------------------------------------------------------------------

PROXY_PIDFILE = HOME / "s3-proxy.pid"


def start_proxy() -> None:
    listen, target = os.environ["S3_PORT"], os.environ["S3_BACKEND_PORT"]
    with open(HOME / "s3-proxy.log", "a") as out:
        process = subprocess.Popen([sys.executable, "-m", "bench.chaos.proxy", listen, target], cwd=ROOT,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    PROXY_PIDFILE.write_text(f"{process.pid}\n")
    import socket

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", int(listen))) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the S3 proxy did not listen on 127.0.0.1:{listen} within 30 s; see {HOME}/s3-proxy.log")


def kill_proxy() -> None:
    try:
        pid = int(PROXY_PIDFILE.read_text())
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    except (OSError, ValueError, ChildProcessError):
        pass
