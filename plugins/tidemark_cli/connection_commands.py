"""Where the CLI reads Airflow Connections: ``AIRFLOW_CONN_<ID>`` first (no Airflow needed), then Airflow's
own lookup (its secrets backends), then Airflow's metadata database (a connection made in the UI), which
outside Airflow's services its lookup does not read. Also opens a pipeline's run with them, and keeps the CLI's
stdout for its output."""

from __future__ import annotations

import logging
import os
import sys

from tidemark.connections import Connection, EnvironmentResolver
from tidemark.errors import ConfigError

KAFKA_DEBUG_VARIABLE = "TIDEMARK_KAFKA_DEBUG"
"""``TIDEMARK_KAFKA_DEBUG=1``: kafka-python's own log lines reach the CLI's stderr (``logs_to_stderr``)."""


class CliConnectionResolver:
    """``AIRFLOW_CONN_<ID>`` from the environment first (fast, no Airflow import); otherwise
    Airflow's own lookup, when Airflow is installed, then Airflow's metadata database (a connection
    made in the UI lives only there, and outside Airflow's services its lookup does not read it)."""

    def __init__(self) -> None:
        self.environment = EnvironmentResolver()

    def get(self, conn_id: str, pipeline: str | None = None) -> Connection:
        try:
            return self._lookup(conn_id, pipeline)
        finally:  # on every route (a Kafka client follows): Airflow's lookup set up its logging
            logs_to_stderr()

    def _lookup(self, conn_id: str, pipeline: str | None) -> Connection:
        if f"AIRFLOW_CONN_{conn_id.upper()}" in os.environ:
            return self.environment.get(conn_id, pipeline)
        try:
            from tidemark_airflow.resolver import AirflowConnectionResolver
        except ImportError:
            return self.environment.get(conn_id, pipeline)  # no Airflow here: says how to define it
        try:
            return AirflowConnectionResolver().get(conn_id, pipeline)
        except ConfigError:
            connection = _stored_connection(conn_id)
            if connection is None:
                raise
            return connection

    def mask(self, secrets) -> None:
        """The CLI prints no connection values."""


def _stored_connection(conn_id: str) -> Connection | None:
    """The connection as Airflow's metadata database holds it (its password and extra decrypted with
    Airflow's Fernet key), or None: no such row, or no database this process can open."""
    try:
        from airflow.models.connection import Connection as StoredConnection
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            stored = session.scalar(select(StoredConnection).where(StoredConnection.conn_id == conn_id))
            if stored is None:
                return None
            try:  # the password and extra are decrypted with this process's [core] fernet_key
                return Connection(conn_id, stored.conn_type, stored.host, stored.port, stored.login, stored.password,
                                  stored.extra_dejson or {})
            except Exception as exc:
                raise ConfigError(f"Airflow connection '{conn_id}' is in the metadata DB but cannot be decrypted here "
                                  f"({type(exc).__name__}): run the CLI with the same [core] fernet_key as Airflow's "
                                  f"services (AIRFLOW__CORE__FERNET_KEY)") from None
    except ConfigError:
        raise
    except Exception as exc:  # no Airflow, no metadata DB configured or reachable: the lookup's own error stands
        logging.getLogger("tidemark").debug("no connection '%s' in Airflow's metadata DB: %s", conn_id, exc)
        return None


RESOLVER = CliConnectionResolver()


def open_run(name: str):
    """The pipeline's run (``tidemark.run.PipelineRun``), its connections read through the CLI's resolver."""
    from tidemark.run import PipelineRun

    return PipelineRun.open(name, RESOLVER)


def logs_to_stderr() -> None:
    """Airflow's logging set-up writes log records to stdout, but the CLI's stdout is its output
    (scripts parse ``--json``): warnings, such as kafka-python's notes on SASL, go to stderr."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)
    # kafka-python logs every failed connection attempt (dozens while it retries a bad address or a
    # refused password); the CLI's own error sums them up. TIDEMARK_KAFKA_DEBUG=1 (only 1) shows them.
    logging.getLogger("kafka").propagate = os.environ.get(KAFKA_DEBUG_VARIABLE, "").strip() == "1"
