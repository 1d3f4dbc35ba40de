"""Tidemark: one ingest DAG and one replay DAG per pipeline YAML in dags/pipelines/ (or TIDEMARK_PIPELINES_DIR).
Parsing this file reads the YAML files and nothing else: no Kafka, Delta or Spark calls. Broken
files are skipped here and reported as import errors by tidemark_pipeline_errors.py."""

from __future__ import annotations

import logging

from tidemark.config import load_all
from tidemark_airflow.dag_builder import build_ingest_dag, build_replay_dag

pipelines, broken = load_all()
for problem in broken.values():
    logging.getLogger("tidemark").warning("skipping a broken pipeline file: %s", problem)
for config in pipelines.values():
    globals()[config.dag_id] = build_ingest_dag(config)
    globals()[f"tidemark_replay__{config.name}"] = build_replay_dag(config)
