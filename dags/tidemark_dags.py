"""Tidemark: one ingest DAG and one replay DAG per pipeline YAML in dags/pipelines/ (or TIDEMARK_PIPELINES_DIR).
Parsing this file reads the YAML files and nothing else: no Kafka, Delta or Spark calls. Broken
files are skipped here and reported as import errors by tidemark_pipeline_errors.py. In a task's
process Airflow parses this file again: then it reads one YAML file and builds only that task's DAG
(tidemark_airflow.dag_files)."""

from __future__ import annotations

from pathlib import Path

from tidemark_airflow.dag_files import pipeline_dags

globals().update(pipeline_dags(Path(__file__).parent / "pipelines"))
