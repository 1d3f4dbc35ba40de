"""Tidemark: one scheduled-audit DAG (``tidemark_audit__<pipeline>``: ``tidemark audit`` every ``audit.every``)
per pipeline whose YAML has ``audit:``; none otherwise. Parsing reads the pipeline files and nothing else;
broken files are reported by tidemark_pipeline_errors.py."""

from __future__ import annotations

from pathlib import Path

from tidemark.config.pipeline import load_all
from tidemark_airflow.dag_builder import build_audit_dag
from tidemark_airflow.dag_files import dag_file_pipelines
from tidemark_airflow.naming import audit_dag_id

for config in load_all(dag_file_pipelines(Path(__file__).parent / "pipelines"))[0].values():
    if config.audit is not None:
        globals()[audit_dag_id(config.name)] = build_audit_dag(config)
