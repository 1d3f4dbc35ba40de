"""Tidemark: surfaces broken pipeline YAML files as Airflow DAG import errors.

Every valid pipeline gets its DAGs from tidemark_dags.py; this separate file fails to import when
any pipeline file is broken, so the Airflow UI's "DAG Import Errors" names the file and the field
while the other pipelines' DAGs keep loading. It defines no DAG.
"""

from __future__ import annotations

from pathlib import Path

from tidemark.config.pipeline import load_all
from tidemark.errors import ConfigError
from tidemark_airflow.dag_files import dag_file_pipelines

_, broken = load_all(dag_file_pipelines(Path(__file__).parent / "pipelines"))
if broken:
    raise ConfigError(f"{len(broken)} broken pipeline file(s); their DAGs are not loaded, the other pipelines' "
                      "DAGs are unaffected:\n" + "\n".join(f"- {problem}" for problem in broken.values()))
