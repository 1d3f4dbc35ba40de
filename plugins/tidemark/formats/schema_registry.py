"""A Confluent-compatible Schema Registry, read at plan time only.

The plan task asks the registry for every version of the pipeline's subject (``<topic>-value`` by
default) and freezes what it got into the ledger with the batch (``tidemark.batch.schemas.freeze_avro``): the
Spark job and every retry of the batch decode with exactly those schemas and never call the
registry. Requests are bounded by a timeout; a registry that does not answer fails the plan with a
transient error (nothing frozen), one that refuses fails it with a terminal one. The password is
never logged, never put in the plan, the ledger or XCom.

Versions are immutable in a registry, so each (registry, subject, version) is fetched once per
process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote, urlsplit, urlunsplit

from tidemark.connections import Connection, ConnectionResolver
from tidemark.errors import ConfigError, SchemaRegistryError, SchemaRegistryUnavailableError

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RegisteredSchema:
    """One version of a subject: its global schema id (what records carry) and the schema text."""

    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = "AVRO"
    references: tuple[tuple[str, str, int], ...] = ()
    """The schemas it imports (Protobuf): (import name, subject, version) of each."""


class SchemaSource(Protocol):
    """Where the plan gets a subject's versions (the registry client; tests may pass their own)."""

    def versions(self, subject: str) -> list[RegisteredSchema]: ...


_CACHE: dict[tuple[str, str, int], RegisteredSchema] = {}


class RegistryClient:
    """HTTP client of the Confluent-compatible API (Confluent Schema Registry, Apicurio's
    ``/apis/ccompat/v7``, Karapace, Redpanda)."""

    def __init__(self, url: str, username: str | None = None, password: str | None = None, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S, pipeline: str | None = None) -> None:
        self.url = url.rstrip("/")
        self._auth = (username, password or "") if username else None
        self.timeout_s = timeout_s
        self.pipeline = pipeline

    def __repr__(self) -> str:  # never the password
        return f"RegistryClient({self.url!r}, user={self._auth[0] if self._auth else None!r})"

    def _get(self, path: str, what: str):
        import requests

        try:
            response = requests.get(f"{self.url}{path}", auth=self._auth, timeout=self.timeout_s,
                                    headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"})
        except (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
                requests.exceptions.InvalidSchema) as exc:
            raise SchemaRegistryError(
                f"the Schema Registry connection's URL '{self.url}' is not a valid http(s) URL ({type(exc).__name__}). "
                f"Nothing was frozen: fix the registry connection's host (e.g. http://registry:8081).",
                pipeline=self.pipeline) from None
        except requests.exceptions.SSLError as exc:
            raise SchemaRegistryError(
                f"the Schema Registry at {self.url} failed the TLS handshake while reading {what} "
                f"({str(exc)[:200]}). Nothing was frozen: fix the registry's certificate or the URL's scheme.",
                pipeline=self.pipeline) from None
        except requests.RequestException as exc:
            raise SchemaRegistryUnavailableError(
                f"the Schema Registry at {self.url} did not answer within {self.timeout_s:g} s while reading {what} "
                f"({type(exc).__name__}). Nothing was frozen; the plan task is retried. Check that the registry is "
                f"up and the connection's URL is right.", pipeline=self.pipeline) from None
        if response.status_code in (401, 403):
            raise SchemaRegistryError(
                f"the Schema Registry at {self.url} refused the connection's credentials (HTTP "
                f"{response.status_code}) while reading {what}. Nothing was frozen: fix the login and password of "
                f"the registry connection.", pipeline=self.pipeline)
        if response.status_code == 404 and _error_code(response) in (40401, 40402, 40403):
            raise SchemaRegistryError(
                f"the Schema Registry at {self.url} does not have {what} (HTTP 404: {_message(response)}). Nothing was "
                f"frozen: register the schema, or name the subject and version in the pipeline file (value_subject, "
                f"key_subject, value_schema_version).", pipeline=self.pipeline)
        if response.status_code == 404:
            raise SchemaRegistryError(
                f"the Schema Registry at {self.url} answered HTTP 404 without a registry error code while reading "
                f"{what}: the URL may not be the Confluent-compatible API (for Apicurio, <host>/apis/ccompat/v7). "
                f"Nothing was frozen: fix the registry connection's host.", pipeline=self.pipeline)
        if response.status_code >= 500:
            raise SchemaRegistryUnavailableError(
                f"the Schema Registry at {self.url} failed while reading {what} (HTTP {response.status_code}: "
                f"{_message(response)}). Nothing was frozen; the plan task is retried.", pipeline=self.pipeline)
        if response.status_code != 200:
            raise SchemaRegistryError(f"the Schema Registry at {self.url} answered HTTP {response.status_code} "
                                      f"while reading {what}: {_message(response)}", pipeline=self.pipeline)
        try:
            return response.json()
        except ValueError:
            raise SchemaRegistryError(f"the Schema Registry at {self.url} did not answer JSON while reading {what}; "
                                      f"is the connection's URL the Confluent-compatible API (for Apicurio, "
                                      f"<host>/apis/ccompat/v7)?", pipeline=self.pipeline) from None

    def versions(self, subject: str) -> list[RegisteredSchema]:
        """Every version of ``subject``, oldest first."""
        numbers = self._get(f"/subjects/{quote(subject, safe='')}/versions", f"the versions of subject '{subject}'")
        found = []
        for number in sorted(int(n) for n in numbers):
            key = (self.url, subject, number)
            if key not in _CACHE:
                data = self._get(f"/subjects/{quote(subject, safe='')}/versions/{number}",
                                 f"version {number} of subject '{subject}'")
                references = tuple((str(r["name"]), str(r["subject"]), int(r["version"]))
                                   for r in data.get("references") or ())
                _CACHE[key] = RegisteredSchema(subject, int(data["version"]), int(data["id"]), data["schema"],
                                               data.get("schemaType") or "AVRO", references)
            found.append(_CACHE[key])
        log.info("schema registry %s: subject '%s' has versions %s (ids %s)", self.url, subject,
                 [s.version for s in found], [s.id for s in found])
        return found


def _error_code(response) -> int | None:
    """The registry's own error code (40401: no such subject, 40402: no such version, 40403: no such schema)."""
    try:
        code = response.json().get("error_code")
    except (ValueError, AttributeError):
        return None
    return code if isinstance(code, int) else None


def _message(response) -> str:
    try:
        return str(response.json().get("message", ""))[:200]
    except ValueError:
        return response.text[:200]


def registry_url(conn: Connection) -> str:
    """The API's base URL from a connection: ``host`` as a whole URL (``http://host:8081``, with a
    path for Apicurio: ``http://host:8080/apis/ccompat/v7``), or a bare host name with ``port``;
    ``extra.url`` wins over both."""
    url = str((conn.extra or {}).get("url") or "")
    if not url:
        host = conn.host or ""
        if not host:
            raise ConfigError(f"connection '{conn.conn_id}' has no host: give the Schema Registry's URL "
                              f"(for example http://registry:8081) as its host or as extra 'url'")
        if "://" not in host:
            host = f"http://{host}"
        if conn.port and not urlsplit(host).port:
            parts = urlsplit(host)
            host = urlunsplit(parts._replace(netloc=f"{parts.netloc}:{conn.port}"))
        url = host
    return url


def client_for(resolver: ConnectionResolver, conn_id: str, pipeline: str | None = None, *,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> RegistryClient:
    """A registry client from an Airflow connection (``http`` type: URL, optional login and
    password); the password is registered with the resolver's masker."""
    conn = resolver.get(conn_id, pipeline)
    if conn.password:
        resolver.mask([conn.password])
    return RegistryClient(registry_url(conn), conn.login, conn.password, timeout_s=timeout_s, pipeline=pipeline)
