"""Airflow names of a pipeline's DAGs (a contract: users, tests and the UI rely on them)."""

from __future__ import annotations

INGEST_PREFIX = "tidemark_ingest__"
REPLAY_PREFIX = "tidemark_replay__"


def ingest_dag_id(pipeline: str) -> str:
    """The scheduled, manual and native-backfill DAG of a pipeline."""
    return f"{INGEST_PREFIX}{pipeline}"


def replay_dag_id(pipeline: str) -> str:
    """The offset-reset (replay) DAG of a pipeline."""
    return f"{REPLAY_PREFIX}{pipeline}"


CONSOLE_URL_PREFIX = "/tidemark"
"""Where the Tidemark page is mounted on the api-server."""
