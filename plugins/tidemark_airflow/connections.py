"""Airflow Connections -> plain values for the core. Kafka: client properties under Kafka's own
dotted names in ``extra`` (as Airflow's Kafka provider keeps them); ``AIRFLOW_CONN_*`` works."""

from __future__ import annotations

from tidemark.errors import ConfigError


def _get(conn_id: str, pipeline: str | None):
    from airflow.sdk import BaseHook

    try:
        return BaseHook.get_connection(conn_id)
    except Exception as exc:
        if type(exc).__name__ in {"AirflowNotFoundException", "AirflowNotFoundError"} or "isn't defined" in str(exc):
            raise ConfigError(f"Airflow connection '{conn_id}' is not defined; create it (UI: Admin -> "
                              f"Connections) or set AIRFLOW_CONN_{conn_id.upper()}", pipeline=pipeline) from None
        raise


def _mask(secrets: list[str]) -> None:
    """Register credentials with Airflow's secrets masker, so a log line that ever held one shows
    ``***``. Airflow masks a connection's password and extra fields with secret-sounding names on
    its own, but not a ``sasl.jaas.config`` (nor the password inside it)."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - Airflow is part of the environment
        return
    for secret in secrets:
        mask_secret(secret)


def kafka_properties(conn_id: str, pipeline: str | None = None) -> dict[str, str]:
    """Kafka client properties from the connection's extra (``bootstrap.servers`` may also come
    from host:port). The credentials in them are registered with Airflow's secrets masker."""
    from tidemark.kafka_client import secret_values

    conn = _get(conn_id, pipeline)
    props = {k: str(v) for k, v in (conn.extra_dejson or {}).items()}
    _mask(secret_values(props))
    if "bootstrap.servers" not in props and conn.host:
        props["bootstrap.servers"] = f"{conn.host}:{conn.port or 9092}"
    if "bootstrap.servers" not in props:
        raise ConfigError(f"Airflow connection '{conn_id}' has no 'bootstrap.servers' in its extra "
                          f"(and no host)", pipeline=pipeline)
    return props


def spark_master(conn_id: str, pipeline: str | None = None) -> str:
    """The Spark master URL of a Spark connection, as the Spark provider reads it."""
    conn = _get(conn_id, pipeline)
    host = conn.host or "local[*]"
    if conn.port and (host.startswith("spark://") or "://" not in host and not host.startswith("local")):
        return f"{host}:{conn.port}"
    return host
