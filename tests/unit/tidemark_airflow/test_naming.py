"""The DAG ids of a pipeline (tidemark_airflow.naming): put together and taken apart in one module only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tidemark_airflow import naming

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"


@pytest.mark.parametrize("pipeline", ["orders", "orders.eu-1", "tidemark_ingest__x"])
def test_a_dag_id_gives_back_its_pipeline(pipeline):
    assert naming.pipeline_of(naming.ingest_dag_id(pipeline)) == pipeline
    assert naming.pipeline_of(naming.replay_dag_id(pipeline)) == pipeline
    # the maintenance and audit DAGs' Tidemark tab opens their pipeline's page too
    assert naming.pipeline_of(naming.maintenance_dag_id(pipeline)) == pipeline
    assert naming.pipeline_of(naming.audit_dag_id(pipeline)) == pipeline


@pytest.mark.parametrize("dag_id", ["tidemark_other__orders", "other_dag", "", None])
def test_another_dag_has_no_pipeline(dag_id):
    assert naming.pipeline_of(dag_id) is None


def test_no_module_but_naming_spells_a_dag_prefix():
    """Issue 42: tasks.dag_run_state_lookup stripped the literal 'tidemark_ingest__'; the prefixes have one home."""
    prefixes = (naming.INGEST_PREFIX, naming.REPLAY_PREFIX, naming.MAINTENANCE_PREFIX, naming.AUDIT_PREFIX)
    spelt = []
    for path in sorted(PLUGINS.rglob("*.py")):
        source = path.read_text()
        if path.name == "naming.py" or not any(prefix in source for prefix in prefixes):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in prefixes:
                spelt.append(f"{path.relative_to(PLUGINS)}:{node.lineno}")
    assert spelt == []
