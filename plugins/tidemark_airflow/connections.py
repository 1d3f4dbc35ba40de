"""Airflow's side of the connection lookup: a ``ConnectionResolver`` on ``BaseHook.get_connection``
(secrets backends, the metadata DB, ``AIRFLOW_CONN_*``) that registers credentials with Airflow's
secrets masker."""

from __future__ import annotations

from collections.abc import Iterable

from tidemark import connections
from tidemark.connections import Connection
from tidemark.errors import ConfigError


class AirflowConnectionResolver:
    """Connections as Airflow resolves them."""

    def get(self, conn_id: str, pipeline: str | None = None) -> Connection:
        from airflow.sdk import BaseHook

        try:
            conn = BaseHook.get_connection(conn_id)
        except Exception as exc:
            missing = type(exc).__name__ in {"AirflowNotFoundException", "AirflowNotFoundError"}
            if missing or "isn't defined" in str(exc):
                raise ConfigError(f"Airflow connection '{conn_id}' is not defined; create it (UI: Admin -> "
                                  f"Connections) or set AIRFLOW_CONN_{conn_id.upper()}", pipeline=pipeline) from None
            raise
        return Connection(conn_id, conn.conn_type, conn.host, conn.port, conn.login, conn.password,
                          conn.extra_dejson or {})

    def mask(self, secrets: Iterable[str]) -> None:
        """Airflow masks a connection's password and secret-sounding extra fields on its own, but not
        a ``sasl.jaas.config`` (nor the password inside it)."""
        from airflow.sdk.log import mask_secret

        for secret in secrets:
            mask_secret(secret)


RESOLVER = AirflowConnectionResolver()


def kafka_properties(conn_id: str, pipeline: str | None = None) -> dict[str, str]:
    return connections.kafka_properties(RESOLVER, conn_id, pipeline)


def spark_master(conn_id: str, pipeline: str | None = None) -> str:
    return connections.spark_master(RESOLVER, conn_id, pipeline)


def schema_registry(config):
    """The Schema Registry client of an Avro pipeline (None for other formats); its password is masked."""
    from tidemark.schema_registry import client_for

    avro = "avro" in (config.value_format, config.key_format)
    return client_for(RESOLVER, config.schema_registry_conn_id, config.name) if avro else None


def configure_storage(config) -> None:
    """Object-store settings for this task's process, from the pipeline's ``storage_conn_id``, when
    one of its tables is on S3 (the core's delta-rs calls then use them)."""
    from tidemark import storage

    storage.configure_for(config.locations, RESOLVER, config.storage_conn_id, config.name)


def object_store(conn_id: str, pipeline: str | None = None):
    from tidemark import storage

    return storage.object_store(RESOLVER, conn_id, pipeline)
