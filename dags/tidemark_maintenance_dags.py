"""Tidemark: one table-maintenance DAG (``tidemark_maintenance__<pipeline>``: OPTIMIZE, VACUUM, log
checkpoints) per pipeline whose YAML has ``maintenance:``. Parsing reads the pipeline files and nothing
else; broken files are reported by tidemark_pipeline_errors.py."""

from __future__ import annotations

from pathlib import Path

from tidemark.config.pipeline import load_all
from tidemark_airflow.dag_builder import build_maintenance_dag
from tidemark_airflow.dag_files import dag_file_pipelines
from tidemark_airflow.naming import maintenance_dag_id

for config in load_all(dag_file_pipelines(Path(__file__).parent / "pipelines"))[0].values():
    if config.maintenance is not None:
        globals()[maintenance_dag_id(config.name)] = build_maintenance_dag(config)
