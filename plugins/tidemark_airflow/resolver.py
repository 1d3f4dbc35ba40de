"""Airflow's side of the connection lookup: a ``ConnectionResolver`` on ``BaseHook.get_connection``
(``AIRFLOW_CONN_*``, secrets backends, and in a task the metadata DB through the execution API) that
registers credentials with Airflow's secrets masker, and ``open_run``, the Airflow adapters' one way to a
``tidemark.run.PipelineRun``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tidemark.batch.plan import BatchPlan
from tidemark.config.pipeline import PipelineConfig, find_pipeline
from tidemark.connections import Connection
from tidemark.errors import ConfigError
from tidemark.run import PipelineRun
from tidemark.settings import pipelines_dir


class AirflowConnectionResolver:
    """Connections as Airflow resolves them."""

    def get(self, conn_id: str, pipeline: str | None = None) -> Connection:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = BaseHook.get_connection(conn_id)
        except AirflowNotFoundException:
            raise ConfigError(f"Airflow connection '{conn_id}' is not defined; create it (UI: Admin -> "
                              f"Connections) or set AIRFLOW_CONN_{conn_id.upper()}", pipeline=pipeline) from None
        return Connection(conn_id, conn.conn_type, conn.host, conn.port, conn.login, conn.password,
                          conn.extra_dejson or {})

    def mask(self, secrets: Iterable[str]) -> None:
        """Airflow masks a connection's password and secret-sounding extra fields on its own, but not
        a ``sasl.jaas.config`` (nor the password inside it)."""
        from airflow.sdk.log import mask_secret

        for secret in secrets:
            mask_secret(secret)


RESOLVER = AirflowConnectionResolver()


def pipelines_folder() -> Path:
    """The pipelines folder of Airflow's processes: ``TIDEMARK_PIPELINES_DIR``, else ``pipelines`` in
    Airflow's DAGs folder (``[core] dags_folder``), where the DAG file finds them; never the process's
    working directory, which differs between the DAG processor, a task's process and the api-server."""
    from airflow.configuration import conf

    return pipelines_dir(default=Path(conf.get("core", "dags_folder")) / "pipelines")


def open_run(pipeline: str | PipelineConfig) -> PipelineRun:
    """The pipeline's run (by name, from ``pipelines_folder``), its connections read through Airflow."""
    config = find_pipeline(pipeline, pipelines_folder()) if isinstance(pipeline, str) else pipeline
    return PipelineRun.open(config, RESOLVER)


def run_for_plan(plan: BatchPlan) -> PipelineRun:
    """The run that executes (or reports) a frozen batch, its pipeline read from ``pipelines_folder``."""
    return PipelineRun.for_plan(plan, RESOLVER, pipelines_folder())
