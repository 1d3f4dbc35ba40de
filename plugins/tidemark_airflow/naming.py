"""Airflow names of a pipeline's DAGs (a contract: users, tests and the UI rely on them)."""

from __future__ import annotations

INGEST_PREFIX = "tidemark_ingest__"
REPLAY_PREFIX = "tidemark_replay__"
MAINTENANCE_PREFIX = "tidemark_maintenance__"
AUDIT_PREFIX = "tidemark_audit__"


def ingest_dag_id(pipeline: str) -> str:
    """The scheduled, manual and native-backfill DAG of a pipeline."""
    return f"{INGEST_PREFIX}{pipeline}"


def replay_dag_id(pipeline: str) -> str:
    """The offset-reset (replay) DAG of a pipeline."""
    return f"{REPLAY_PREFIX}{pipeline}"


def maintenance_dag_id(pipeline: str) -> str:
    """The maintenance DAG of a pipeline (OPTIMIZE, VACUUM, checkpoints)."""
    return f"{MAINTENANCE_PREFIX}{pipeline}"


def audit_dag_id(pipeline: str) -> str:
    """The scheduled audit DAG of a pipeline."""
    return f"{AUDIT_PREFIX}{pipeline}"


def pipeline_of(dag_id: str | None) -> str | None:
    """The pipeline of a Tidemark DAG id (ingest, replay, maintenance, audit; None for any other DAG): the one place
    that takes a DAG id apart, as the ``*_dag_id`` functions are the ones that put it together."""
    for prefix in (INGEST_PREFIX, REPLAY_PREFIX, MAINTENANCE_PREFIX, AUDIT_PREFIX):
        if dag_id and dag_id.startswith(prefix):
            return dag_id[len(prefix):]
    return None


CONSOLE_URL_PREFIX = "/tidemark"
"""Where the Tidemark page is mounted on the api-server."""
