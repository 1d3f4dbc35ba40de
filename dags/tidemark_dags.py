"""Tidemark: one ingest DAG and one replay DAG per pipeline YAML in dags/pipelines/ (or TIDEMARK_PIPELINES_DIR).
Parsing this file reads the YAML files and nothing else: no Kafka, Delta or Spark calls. Broken
files are skipped here and reported as import errors by tidemark_pipeline_errors.py."""

from __future__ import annotations

import logging
from pathlib import Path

from tidemark.config import load_all
from tidemark.settings import pipelines_dir
from tidemark_airflow.dag_builder import build_ingest_dag, build_replay_dag
from tidemark_airflow.naming import ingest_dag_id, replay_dag_id

pipelines, broken = load_all(pipelines_dir(default=Path(__file__).parent / "pipelines"))
for problem in broken.values():
    logging.getLogger("tidemark").warning("skipping a broken pipeline file: %s", problem)
for config in pipelines.values():
    globals()[ingest_dag_id(config.name)] = build_ingest_dag(config)
    globals()[replay_dag_id(config.name)] = build_replay_dag(config)
