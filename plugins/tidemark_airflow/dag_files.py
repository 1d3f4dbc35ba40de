"""What ``dags/tidemark_dags.py`` builds: every pipeline's ingest and replay DAGs where Airflow parses the
DAG folder (the dag-processor), and only the one DAG a task runs in where a task starts (Airflow parses
the task's DAG file in every task process). Airflow names that DAG in its parsing context
(``get_parsing_context``; Airflow's docs: "Optimizing DAG parsing delays during execution"), so a task
reads and validates one pipeline file and builds one DAG, whatever the number of pipelines."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from tidemark.config.pipeline import PipelineConfig, load_all, load_pipeline, pipeline_files
from tidemark.errors import ConfigError
from tidemark.settings import PIPELINES_DIR_ENV, pipelines_dir
from tidemark_airflow.naming import ingest_dag_id, pipeline_of, replay_dag_id

log = logging.getLogger("tidemark")


def dag_file_pipelines(default_folder: Path) -> Path:
    """The pipelines folder of a DAG file: ``TIDEMARK_PIPELINES_DIR``, else ``default_folder`` (``pipelines``
    beside the file). Without the variable, this process's later lookups by name (a task's ``open_run``, the
    ingest operator, the success callbacks) are pointed at the same folder: Airflow parses the DAG file in
    every task process before the task runs, wherever its DAG bundle put the file and whatever the working
    directory (elsewhere, as in the api-server, ``resolver.pipelines_folder`` reads Airflow's dags_folder)."""
    folder = pipelines_dir(default=default_folder)
    os.environ.setdefault(PIPELINES_DIR_ENV, str(folder))
    return folder


def task_dag_id() -> str | None:
    """The DAG whose task this process runs (None where Airflow parses the whole folder)."""
    from airflow.sdk import get_parsing_context

    return get_parsing_context().dag_id


def pipelines_to_build(folder: Path) -> dict[str, PipelineConfig]:
    """Every valid pipeline of the folder, or, in a task of a pipeline's DAG, that pipeline alone. A broken
    file is skipped with a warning (``tidemark_pipeline_errors.py`` reports it as an import error)."""
    dag_id = task_dag_id()
    if dag_id is not None:
        name = pipeline_of(dag_id)
        paths = [p for p in pipeline_files(folder) if p.stem == name]
        if not paths:
            return {}  # not a Tidemark DAG (or its file is gone): Airflow says the DAG was not found
        try:
            return {name: load_pipeline(paths[0])}
        except ConfigError as exc:
            log.warning("skipping a broken pipeline file: %s", exc)
            return {}
    pipelines, broken = load_all(folder)
    for problem in broken.values():
        log.warning("skipping a broken pipeline file: %s", problem)
    return pipelines


def pipeline_dags(default_folder: Path) -> dict[str, object]:
    """The DAGs to define, by DAG id: each pipeline's ingest and replay DAGs (in a task, only the task's)."""
    from tidemark_airflow.dag_builder import build_ingest_dag, build_replay_dag

    wanted = task_dag_id()
    dags = {}
    for config in pipelines_to_build(dag_file_pipelines(default_folder)).values():
        for dag_id, build in ((ingest_dag_id(config.name), build_ingest_dag),
                              (replay_dag_id(config.name), build_replay_dag)):
            if wanted is None or wanted == dag_id:
                dags[dag_id] = build(config)
    return dags
