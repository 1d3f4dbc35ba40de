"""End-to-end fixtures: one private Airflow home per pytest session (a SQLite metadata DB, migrated
once, in this process), a pipelines folder and a lake per test, and `stack.run_dag`, which loads the
DAG from the real dags folder and runs it here with `dag.test()` (every task in this process, the
ingest task's spark-submit a real JVM). `stack.run_dag_with_cli` runs the real user command,
`airflow dags test`, as a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import helpers

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(ROOT / ".venv" / "bin" / "airflow")

# Airflow reads its home and database when it is first imported, so the session's home is set as
# this module loads: during collection, before any test (of any tier) can import airflow.
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="tidemark-e2e-airflow-"))
OPENLINEAGE_FILE = "openlineage.jsonl"
AIRFLOW_SETTINGS = {
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
    "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    # OpenLineage events of every e2e run, to a file (the provider's file transport), with the full
    # task info: the lineage test reads them and the leak searches include them.
    "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "append": True,
                                                   "log_file_path": str(AIRFLOW_HOME / OPENLINEAGE_FILE)}),
    "AIRFLOW__OPENLINEAGE__NAMESPACE": "tidemark-tests",
    "AIRFLOW__OPENLINEAGE__INCLUDE_FULL_TASK_INFO": "True",
    "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",  # no fork of the pytest process per task event
}
if "airflow" in sys.modules:
    raise RuntimeError("airflow was imported before tests/e2e/conftest.py could give it a private home; import "
                       "it inside the tests (as tests/dags does), not at module level")
os.environ.update(AIRFLOW_SETTINGS)


def pytest_unconfigure(config) -> None:
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """The session's Airflow home, its SQLite metadata DB migrated once (Airflow's own migration,
    in this process)."""
    from airflow.utils.db import initdb

    initdb()
    return AIRFLOW_HOME


@dataclass
class DagRun:
    run_id: str
    state: str
    log: str
    task_states: dict[str, str | None]


class _Tee:
    """A text stream writing to ``stream`` and to ``copy``."""

    def __init__(self, stream, copy) -> None:
        self._stream, self._copy = stream, copy

    def write(self, text: str) -> int:
        self._copy.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def captured_output(log: list[str]) -> Iterator[None]:
    """Everything Airflow prints while the block runs, as `airflow dags test` would print it: the
    lines its log handlers render (after secret masking) and whatever goes to stdout/stderr. The
    spark-submit output is in it: the Spark provider logs the job's every line. Appends the text
    to ``log``; the output still reaches pytest's capture as well."""
    import io
    import logging

    copy = io.StringIO()
    handlers = [h for h in logging.getLogger().handlers  # Airflow's, not pytest's own (unmasked) capture
                if isinstance(h, logging.StreamHandler) and not type(h).__module__.startswith("_pytest")]
    streams = [h.setStream(_Tee(h.stream, copy)) for h in handlers]
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(out, copy), _Tee(err, copy)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
        for handler, stream in zip(handlers, streams, strict=True):
            handler.setStream(stream)
        log.append(copy.getvalue())


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """This process's environment is exactly ``env`` while the block runs (as if it had been
    started with it, like `airflow dags test`); restored afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def recorded_run(dag_id: str, run_id: str) -> tuple[str, dict[str, str | None]]:
    """The run's state and its task instances' states, from the metadata DB's rows."""
    from airflow.models.dagrun import DagRun as DagRunRow
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    def value(state) -> str | None:
        return None if state is None else str(getattr(state, "value", state))

    with create_session() as session:
        state = session.scalar(select(DagRunRow.state).where(DagRunRow.dag_id == dag_id, DagRunRow.run_id == run_id))
        tis = session.execute(select(TaskInstance.task_id, TaskInstance.state).where(
            TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)).all()
    assert state is not None, f"no run {run_id} of {dag_id} in the metadata DB"
    return value(state), {task_id: value(ti_state) for task_id, ti_state in tis}


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

    def use_spark_connect(self, url: str) -> None:
        """Run the ingest task on the warm path: the Spark connection is the Spark Connect server at
        ``url`` (the test run's one: scripts/connect.sh), so no DAG run of this stack starts a JVM."""
        self.env["AIRFLOW_CONN_SPARK_DEFAULT"] = helpers.spark_connect_connection(url)

    def airflow(self, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def run_dag(self, dag_id: str, conf: dict | None = None) -> DagRun:
        """Run the DAG in this process with `dag.test()`, in the stack's environment (``env`` as it
        is now: tests may change it between runs), against the session's metadata DB."""
        log: list[str] = []
        with environment(self.env), captured_output(log):
            from airflow.dag_processing.dagbag import DagBag

            bag = DagBag(dag_folder=str(ROOT / "dags"))  # parses the pipelines folder of this test
            assert bag.import_errors == {}, bag.import_errors
            assert dag_id in bag.dags, f"{dag_id} is not among the parsed DAGs {sorted(bag.dags)}"
            try:
                run_id = bag.dags[dag_id].test(run_conf=conf).run_id
            finally:
                from airflow import settings

                settings.Session.remove()  # the next run starts with a fresh ORM session, even after an error
        state, task_states = recorded_run(dag_id, run_id)
        return DagRun(run_id, state, log[0], task_states)

    def run_dag_with_cli(self, dag_id: str, conf: dict | None = None) -> DagRun:
        """The real user command, `airflow dags test`, in a process of its own."""
        result = self.airflow("dags", "test", dag_id, *(["-c", json.dumps(conf)] if conf else []))
        log = result.stdout + result.stderr
        match = re.search(r"DagRun Finished: dag_id=\S+, logical_date=[^,]*, run_id=([^,]+),.*?state=(\w+)", log)
        # `dags test` exits 1 when the run fails: that is a result to check, not a broken harness
        assert match and result.returncode == (0 if match.group(2) == "success" else 1), \
            f"`airflow dags test {dag_id}` failed:\n{log[-6000:]}"
        state, task_states = recorded_run(dag_id, match.group(1))
        assert state == match.group(2), (state, match.group(2))
        return DagRun(match.group(1), state, log, task_states)

    def tidemark(self, *args: str) -> subprocess.CompletedProcess:
        # `tidemark run` starts Spark: 120 s was too short on a busy 2-core machine
        return subprocess.run([str(ROOT / ".venv" / "bin" / "tidemark"), *args], env=self.env,
                              capture_output=True, text=True, timeout=300)


@pytest.fixture
def stack(airflow_home, tmp_path, kafka_bootstrap) -> Stack:
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    lake = tmp_path / "lake"
    return Stack(helpers.service_env(pipelines, lake, **AIRFLOW_SETTINGS), pipelines, lake)
