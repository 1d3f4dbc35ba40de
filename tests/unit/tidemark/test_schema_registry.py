"""The Schema Registry client (tidemark.formats.schema_registry): the URL from a connection, and the client's error
mapping against a real local HTTP server."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.unit.tidemark.avro_samples import V1, V2, V3_NO_DEFAULT
from tidemark.batch.schemas import freeze_avro
from tidemark.connections import Connection
from tidemark.errors import ConfigError, SchemaRegistryError, SchemaRegistryUnavailableError, is_transient
from tidemark.formats import schema_registry
from tidemark.formats.schema_registry import RegisteredSchema, RegistryClient, client_for, registry_url

pytestmark = pytest.mark.unit


# --- the registry client ----------------------------------------------------------------------------

def conn(**fields) -> Connection:
    return Connection("schema_registry_default", "http", **fields)


@pytest.mark.parametrize(("connection", "url"), [
    (conn(host="http://registry:8081"), "http://registry:8081"),
    (conn(host="https://registry.example.com"), "https://registry.example.com"),
    (conn(host="http://registry:8080/apis/ccompat/v7"), "http://registry:8080/apis/ccompat/v7"),
    (conn(host="registry", port=8081), "http://registry:8081"),
    (conn(host="registry"), "http://registry"),
    (conn(host="ignored", port=1, extra={"url": "http://other:9000/api"}), "http://other:9000/api"),
    (conn(extra={"url": "http://other:9000"}), "http://other:9000"),
])
def test_registry_url_from_the_host_forms(connection, url):
    assert registry_url(connection) == url


def test_registry_url_needs_a_host():
    with pytest.raises(ConfigError, match=r"connection 'schema_registry_default' has no host: give the Schema "
                                          r"Registry's URL"):
        registry_url(conn())


class Registry:
    """A stdlib HTTP server on 127.0.0.1 standing in for a registry: ``routes`` maps a path to
    (status, JSON-able body or raw bytes), or to a callable taking the handler; every request is
    recorded as (path, Authorization header)."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, object] | Callable] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.release = threading.Event()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                registry.requests.append((self.path, self.headers.get("Authorization")))
                route = registry.routes.get(self.path, (404, {"error_code": 40401, "message": "Subject not found"}))
                if callable(route):
                    route = route(self)
                    if route is None:
                        return
                status, body = route
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up first
                    pass

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture(autouse=True)
def fresh_cache():
    """The client caches versions per process: every test starts (and leaves) with an empty cache."""
    schema_registry._CACHE.clear()
    yield
    schema_registry._CACHE.clear()


@pytest.fixture
def registry():
    server = Registry()
    yield server
    server.stop()


def serve_subject(server: Registry, subject_path: str, *versions: tuple[int, int, dict, str | None]) -> None:
    """Routes for a subject's versions: (version, id, schema, schemaType or None)."""
    server.routes[f"/subjects/{subject_path}/versions"] = (200, [v for v, *_ in versions])
    for version, schema_id, schema, schema_type in versions:
        body = {"subject": subject_path, "version": version, "id": schema_id, "schema": json.dumps(schema)}
        if schema_type is not None:
            body["schemaType"] = schema_type
        server.routes[f"/subjects/{subject_path}/versions/{version}"] = (200, body)


def test_versions_are_read_oldest_first_and_each_version_once_per_process(registry):
    serve_subject(registry, "shop%2Forders-value", (2, 12, V2, "AVRO"), (1, 11, V1, None))
    registry.routes["/subjects/shop%2Forders-value/versions"] = (200, [2, 1])  # in any order
    client = RegistryClient(registry.url + "/")
    found = client.versions("shop/orders-value")  # a subject with a slash is one path segment
    assert found == [RegisteredSchema("shop/orders-value", 1, 11, json.dumps(V1), "AVRO"),
                     RegisteredSchema("shop/orders-value", 2, 12, json.dumps(V2), "AVRO")]
    assert registry.paths() == ["/subjects/shop%2Forders-value/versions", "/subjects/shop%2Forders-value/versions/1",
                                "/subjects/shop%2Forders-value/versions/2"]
    assert all(auth is None for _, auth in registry.requests)  # no login: no Authorization header

    # Versions are immutable: the second call lists the versions again but fetches none of them.
    assert client.versions("shop/orders-value") == found
    assert registry.paths()[3:] == ["/subjects/shop%2Forders-value/versions"]
    # A new version is fetched alone.
    serve_subject(registry, "shop%2Forders-value", (1, 11, V1, None), (2, 12, V2, None), (3, 13, V3_NO_DEFAULT, None))
    assert [s.version for s in client.versions("shop/orders-value")] == [1, 2, 3]
    assert registry.paths()[4:] == ["/subjects/shop%2Forders-value/versions",
                                    "/subjects/shop%2Forders-value/versions/3"]
    # The frozen result through the real client.
    frozen = freeze_avro("orders", "shop/orders-value", None, client)
    assert frozen.reader_version == 3 and sorted(frozen.unreadable) == ["11", "12"]


def test_basic_auth_is_sent_and_the_password_is_never_shown(registry):
    serve_subject(registry, "orders-value", (1, 11, V1, None))
    client = RegistryClient(registry.url, "alice", "s3cret-canary", pipeline="orders")
    client.versions("orders-value")
    expected = "Basic " + base64.b64encode(b"alice:s3cret-canary").decode()
    assert [auth for _, auth in registry.requests] == [expected, expected]
    assert "s3cret-canary" not in repr(client) and "alice" in repr(client)


def test_401_and_403_are_terminal_and_name_no_password(registry):
    for status in (401, 403):
        registry.routes["/subjects/orders-value/versions"] = (status, {"error_code": status, "message": "nope"})
        client = RegistryClient(registry.url, "alice", "s3cret-canary", pipeline="orders")
        with pytest.raises(SchemaRegistryError) as err:
            client.versions("orders-value")
        assert type(err.value) is SchemaRegistryError and err.value.transient is False
        assert not is_transient(err.value)
        message = str(err.value)
        assert message.startswith("pipeline 'orders': the Schema Registry at ")
        assert f"refused the connection's credentials (HTTP {status})" in message
        assert "s3cret-canary" not in message


def test_404_is_terminal_and_names_the_subject(registry):
    client = RegistryClient(registry.url, pipeline="orders")
    with pytest.raises(SchemaRegistryError) as err:
        client.versions("missing-value")
    assert type(err.value) is SchemaRegistryError and not err.value.transient
    assert "subject 'missing-value'" in str(err.value) and "HTTP 404: Subject not found" in str(err.value)
    # A version that vanished between the listing and its fetch names the version too.
    registry.routes["/subjects/orders-value/versions"] = (200, [1])
    with pytest.raises(SchemaRegistryError, match=r"version 1 of subject 'orders-value' \(HTTP 404"):
        client.versions("orders-value")


def test_a_404_without_a_registry_error_code_points_at_the_url_not_the_subject(registry):
    """A wrong base path (Apicurio without /apis/ccompat/v7) answers 404 for every path: that is not a
    missing subject, and the message says so."""
    registry.routes["/subjects/orders-value/versions"] = (404, b"<html>Not Found</html>")
    with pytest.raises(SchemaRegistryError, match=r"HTTP 404 without a registry error code .* may not be the "
                                                  r"Confluent-compatible API \(for Apicurio") as err:
        RegistryClient(registry.url).versions("orders-value")
    assert not err.value.transient


def test_a_url_that_is_no_http_url_is_terminal():
    with pytest.raises(SchemaRegistryError, match=r"URL 'registry:8081' is not a valid http\(s\) URL") as err:
        RegistryClient("registry:8081").versions("orders-value")
    assert not err.value.transient


def test_a_server_error_is_transient(registry):
    registry.routes["/subjects/orders-value/versions"] = (500, {"error_code": 50001, "message": "store down"})
    with pytest.raises(SchemaRegistryUnavailableError, match=r"failed while reading the versions of subject "
                                                             r"'orders-value' \(HTTP 500: store down\)") as err:
        RegistryClient(registry.url).versions("orders-value")
    assert err.value.transient and is_transient(err.value)
    assert "Nothing was frozen" in str(err.value)


def test_other_answers_are_terminal(registry):
    registry.routes["/subjects/a-value/versions"] = (422, {"error_code": 42201, "message": "bad"})
    registry.routes["/subjects/b-value/versions"] = (200, b"<html>not the API</html>")
    client = RegistryClient(registry.url)
    with pytest.raises(SchemaRegistryError, match=r"answered HTTP 422 while reading the versions of subject "
                                                  r"'a-value': bad"):
        client.versions("a-value")
    with pytest.raises(SchemaRegistryError, match=r"did not answer JSON .* <host>/apis/ccompat/v7") as err:
        client.versions("b-value")
    assert not err.value.transient


def test_a_registry_slower_than_the_timeout_is_transient(registry):
    def slow(handler):
        registry.release.wait(10)
        return 200, [1]

    registry.routes["/subjects/orders-value/versions"] = slow
    with pytest.raises(SchemaRegistryUnavailableError, match=r"did not answer within 0.5 s while reading the "
                                                             r"versions of subject 'orders-value'") as err:
        RegistryClient(registry.url, timeout_s=0.5).versions("orders-value")
    assert err.value.transient


def test_a_closed_port_is_transient():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SchemaRegistryUnavailableError, match=r"ConnectionError") as err:
        RegistryClient(f"http://127.0.0.1:{port}", timeout_s=2).versions("orders-value")
    assert err.value.transient


class FakeResolver:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.masked: list[str] = []

    def get(self, conn_id: str, pipeline: str | None = None) -> Connection:
        assert conn_id == self.connection.conn_id
        return self.connection

    def mask(self, secrets) -> None:
        self.masked += list(secrets)


def test_client_for_masks_the_password():
    resolver = FakeResolver(conn(host="registry", port=8081, login="alice", password="s3cret-canary"))
    client = client_for(resolver, "schema_registry_default", "orders", timeout_s=3)
    assert (client.url, client.timeout_s, client.pipeline) == ("http://registry:8081", 3, "orders")
    assert resolver.masked == ["s3cret-canary"] and "s3cret-canary" not in repr(client)
    anonymous = FakeResolver(conn(host="http://registry:8081"))
    assert client_for(anonymous, "schema_registry_default").url == "http://registry:8081"
    assert anonymous.masked == []
