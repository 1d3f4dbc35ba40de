"""What the DAG file builds (tidemark_airflow.dag_files): every pipeline's DAGs where Airflow parses the folder,
and in a task's process (Airflow's parsing context names the task's DAG) that DAG alone, from its own file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "pipelines"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    for name in ("orders", "payments"):
        shutil.copy(FIXTURES / "good" / f"{name}.yaml", pipelines)
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(pipelines))
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path / "lake"))
    return pipelines


def parsed_in_task(monkeypatch, dag_id: str | None):
    """The DAG file's build under Airflow's parsing context for ``dag_id`` (None: the folder's parse).
    Set with monkeypatch, not Airflow's context manager, which leaves its variables set for the tests
    that run after this one in the same process (they would then build a single DAG)."""
    from airflow.sdk.definitions._internal.dag_parsing_context import (
        _AIRFLOW_PARSING_CONTEXT_DAG_ID,
        _AIRFLOW_PARSING_CONTEXT_TASK_ID,
    )

    from tidemark_airflow.dag_files import pipeline_dags

    for variable, value in ((_AIRFLOW_PARSING_CONTEXT_DAG_ID, dag_id),
                            (_AIRFLOW_PARSING_CONTEXT_TASK_ID, "plan" if dag_id else None)):
        if value is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, value)
    return pipeline_dags(Path("unused"))


def test_the_folder_parse_builds_every_pipelines_dags(folder, monkeypatch):
    assert sorted(parsed_in_task(monkeypatch, None)) == ["tidemark_ingest__orders", "tidemark_ingest__payments",
                                            "tidemark_replay__orders", "tidemark_replay__payments"]


def test_a_task_builds_only_its_dag_and_reads_only_its_pipelines_file(folder, monkeypatch):
    (folder / "payments.yaml").write_text("name: payments\ntopics: [payments\n")  # broken: never read here
    dags = parsed_in_task(monkeypatch, "tidemark_ingest__orders")
    assert list(dags) == ["tidemark_ingest__orders"]
    assert [t.task_id for t in dags["tidemark_ingest__orders"].topological_sort()] == ["plan", "ingest"]
    assert list(parsed_in_task(monkeypatch, "tidemark_replay__orders")) == ["tidemark_replay__orders"]


def test_a_task_of_another_or_a_vanished_dag_builds_nothing(folder, monkeypatch):
    assert parsed_in_task(monkeypatch, "tidemark_example_downstream__orders") == {}
    assert parsed_in_task(monkeypatch, "tidemark_ingest__gone") == {}


def test_a_dag_files_pipelines_folder_is_the_one_its_tasks_read(tmp_path, monkeypatch):
    """Without TIDEMARK_PIPELINES_DIR, the DAG file reads the pipelines beside it wherever its bundle put it,
    and points the process's later lookups by name (its task's open_run) at that same folder."""
    from tidemark.config.pipeline import find_pipeline
    from tidemark_airflow.dag_files import dag_file_pipelines

    beside = tmp_path / "bundle" / "pipelines"
    beside.mkdir(parents=True)
    (beside / "orders.yaml").write_text("name: orders\ntopics: [orders]\ntable: orders\n")
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", "restored-after-the-test")
    monkeypatch.delenv("TIDEMARK_PIPELINES_DIR")
    monkeypatch.chdir(tmp_path)  # a task's working directory, with no dags/pipelines in it
    assert dag_file_pipelines(beside) == beside
    assert find_pipeline("orders").name == "orders"
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(tmp_path / "elsewhere"))
    assert dag_file_pipelines(beside) == tmp_path / "elsewhere"  # the variable wins
