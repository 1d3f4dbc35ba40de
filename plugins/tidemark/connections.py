"""Connections as plain values, and how the core gets them.

Kafka, Spark and storage endpoints and credentials live in Airflow Connections (``kafka_default``,
``spark_default``, ...). The core never imports Airflow: it asks a ``ConnectionResolver``. The
Airflow adapter implements one on Airflow's own lookup (secrets backends, the metadata DB,
``AIRFLOW_CONN_*``); ``EnvironmentResolver`` reads the same ``AIRFLOW_CONN_<ID>`` variables
(Airflow's JSON or URI form) without Airflow, for the CLI and the Spark job.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

from tidemark.errors import ConfigError


@dataclass(frozen=True)
class Connection:
    """The fields of an Airflow Connection that Tidemark reads."""

    conn_id: str
    conn_type: str | None = None
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    extra: Mapping[str, object] = field(default_factory=dict, repr=False)


class ConnectionResolver(Protocol):
    """Where connections come from. ``mask`` registers secret values with whatever hides them in
    logs (Airflow's secrets masker); resolvers without one do nothing."""

    def get(self, conn_id: str, pipeline: str | None = None) -> Connection: ...

    def mask(self, secrets: Iterable[str]) -> None: ...


def _not_defined(conn_id: str, pipeline: str | None) -> ConfigError:
    return ConfigError(f"connection '{conn_id}' is not defined; create it (Airflow UI: Admin -> Connections) or "
                       f"set AIRFLOW_CONN_{conn_id.upper()}", pipeline=pipeline)


def parse_connection(conn_id: str, value: str, pipeline: str | None = None) -> Connection:
    """An ``AIRFLOW_CONN_*`` value in Airflow's JSON form (``{"conn_type": ..., "extra": {...}}``)
    or URI form (``kafka://user:pass@host:9092?bootstrap.servers=...``)."""
    variable = f"AIRFLOW_CONN_{conn_id.upper()}"

    def loaded(text: str, what: str):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{variable}{what} is not valid JSON ({exc.msg} at character {exc.pos})",
                              pipeline=pipeline) from None

    def mapping(extra: object) -> dict:
        if not isinstance(extra, dict):
            raise ConfigError(f"{variable}: its extra must be an object of settings ({{\"bootstrap.servers\": ...}}), "
                              f"not a {type(extra).__name__}", pipeline=pipeline)
        return extra

    text = value.strip()
    if text.startswith("{"):
        data = loaded(text, "")
        extra = data.get("extra") or {}
        if isinstance(extra, str):
            extra = loaded(extra, ": its extra") if extra.strip() else {}
        return Connection(conn_id, data.get("conn_type"), data.get("host"), data.get("port"), data.get("login"),
                          data.get("password"), mapping(extra))
    parts = urlsplit(text)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra = loaded(query.pop("__extra__"), ": its __extra__") if "__extra__" in query else query
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{variable}: the port in '{parts.netloc.rsplit('@', 1)[-1]}' is not a number",
                          pipeline=pipeline) from None
    return Connection(conn_id, parts.scheme.replace("-", "_") or None, unquote(parts.hostname or "") or None,
                      port, unquote(parts.username) if parts.username else None,
                      unquote(parts.password) if parts.password else None, mapping(extra))


class EnvironmentResolver:
    """Connections from ``AIRFLOW_CONN_<ID>`` environment variables only (no Airflow needed)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ

    def get(self, conn_id: str, pipeline: str | None = None) -> Connection:
        value = self.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
        if value is None:
            raise _not_defined(conn_id, pipeline)
        return parse_connection(conn_id, value, pipeline)

    def mask(self, secrets: Iterable[str]) -> None:
        """Nothing to register with: the CLI and the Spark job never log connection values."""


def kafka_properties(resolver: ConnectionResolver, conn_id: str, pipeline: str | None = None) -> dict[str, str]:
    """Kafka client properties from the connection's extra, under Kafka's own dotted names
    (``bootstrap.servers`` may also come from host:port). Their secrets are masked."""
    from tidemark.kafka.client import secret_values

    conn = resolver.get(conn_id, pipeline)
    props = {k: str(v) for k, v in (conn.extra or {}).items()}
    resolver.mask(secret_values(props))
    if "bootstrap.servers" not in props and conn.host:
        props["bootstrap.servers"] = f"{conn.host}:{conn.port or 9092}"
    if "bootstrap.servers" not in props:
        raise ConfigError(f"connection '{conn_id}' has no 'bootstrap.servers' in its extra (and no host)",
                          pipeline=pipeline)
    for server in (s.strip() for s in props["bootstrap.servers"].split(",")):
        if not re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):\d+", server):
            raise ConfigError(f"connection '{conn_id}': bootstrap.servers entry '{server}' has no port; write "
                              f"host:port, e.g. {server.split(':')[0] or 'kafka'}:9092", pipeline=pipeline)
    protocol = props.get("security.protocol")
    if protocol is not None and protocol.upper() not in KAFKA_PROTOCOLS:
        raise ConfigError(f"connection '{conn_id}': security.protocol '{protocol}' is not one of "
                          f"{', '.join(KAFKA_PROTOCOLS)}", pipeline=pipeline)
    return props


KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


SPARK_CONNECT_PORT = 15002


def spark_connect_url(conn: Connection, pipeline: str | None = None) -> str:
    """The ``sc://`` URL of a ``spark_connect`` connection, as the Spark provider's SparkConnectHook
    builds it: host (``sc://`` optional), port (default 15002), login as ``user_id``, password as
    ``token``, extra ``use_ssl``. The token is masked."""
    from urllib.parse import quote

    host = (conn.host or "").strip()
    if not host:
        raise ConfigError(f"Spark Connect connection '{conn.conn_id}' has no host; set it to the server's address "
                          f"(e.g. 127.0.0.1, port {SPARK_CONNECT_PORT})", pipeline=pipeline)
    address = host.removeprefix("sc://").rstrip("/")
    if ":" not in address:
        address = f"{address}:{conn.port or SPARK_CONNECT_PORT}"
    params = []
    if conn.login:
        params.append(f"user_id={quote(conn.login)}")
    if conn.password:
        params.append(f"token={quote(conn.password)}")
    if (conn.extra or {}).get("use_ssl") is not None:
        params.append(f"use_ssl={quote(str(conn.extra['use_ssl']))}")
    return f"sc://{address}/" + (";" + ";".join(params) if params else "")


def spark_connect_address(url: str) -> str:
    """A Spark Connect URL without its parameters (``user_id``, ``token``): what logs and errors show."""
    return url.split(";")[0].rstrip("/")


def spark_master(resolver: ConnectionResolver, conn_id: str, pipeline: str | None = None) -> str:
    """The Spark master URL of a Spark connection, as the Spark provider reads it; for a
    ``spark_connect`` connection, the server's ``sc://`` URL (the warm path: no spark-submit)."""
    conn = resolver.get(conn_id, pipeline)
    if conn.conn_type == "spark_connect":
        if conn.password:
            resolver.mask([conn.password])
        return spark_connect_url(conn, pipeline)
    host = conn.host or "local[*]"
    if conn.port and (host.startswith("spark://") or "://" not in host and not host.startswith("local")):
        return f"{host}:{conn.port}"
    return host


def spark_deploy_mode(resolver: ConnectionResolver, conn_id: str, pipeline: str | None = None) -> str | None:
    """The Spark connection's deploy mode, as the Spark provider reads it (extra ``deploy-mode``)."""
    mode = (resolver.get(conn_id, pipeline).extra or {}).get("deploy-mode")
    return str(mode) if mode else None
