"""End-to-end fixtures: a private Airflow home (SQLite metadata DB, migrated once per session),
a pipelines folder and a lake per test, and a helper that runs a DAG with `airflow dags test`."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import helpers

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(ROOT / ".venv" / "bin" / "airflow")


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("airflow_home")
    env = {**os.environ, "AIRFLOW_HOME": str(home)}
    result = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return home


@dataclass
class DagRun:
    run_id: str
    state: str
    log: str
    task_states: dict[str, str]


@dataclass
class Stack:
    """The environment one e2e test runs Airflow in."""

    env: dict[str, str]
    pipelines: Path
    lake: Path

    def add_pipeline(self, name: str, topics: list[str], **extra) -> str:
        import yaml

        (self.pipelines / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, "topics": topics,
                                                                       "table": name, **extra}))
        return f"tidemark_ingest__{name}"

    def airflow(self, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def run_dag(self, dag_id: str, conf: dict | None = None) -> DagRun:
        result = self.airflow("dags", "test", dag_id, *(["-c", json.dumps(conf)] if conf else []))
        log = result.stdout + result.stderr
        match = re.search(r"DagRun Finished: dag_id=\S+, logical_date=[^,]*, run_id=([^,]+),.*?state=(\w+)", log)
        # `dags test` exits 1 when the run fails: that is a result to check, not a broken harness
        assert match and result.returncode == (0 if match.group(2) == "success" else 1), \
            f"`airflow dags test {dag_id}` failed:\n{log[-6000:]}"
        states = self.airflow("tasks", "states-for-dag-run", dag_id, match.group(1), "-o", "json")
        assert states.returncode == 0, states.stderr[-3000:]
        rows = json.loads(states.stdout[states.stdout.index("["):])
        return DagRun(match.group(1), match.group(2), log, {r["task_id"]: r["state"] for r in rows})

    def tidemark(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(ROOT / ".venv" / "bin" / "tidemark"), *args], env=self.env,
                              capture_output=True, text=True, timeout=120)


@pytest.fixture
def stack(airflow_home, tmp_path, kafka_bootstrap) -> Stack:
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    lake = tmp_path / "lake"
    env = helpers.service_env(pipelines, lake, AIRFLOW_HOME=str(airflow_home),
                              AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    return Stack(env, pipelines, lake)
