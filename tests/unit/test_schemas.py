"""Plan-time schema knowledge (tidemark.schemas) and the Schema Registry client
(tidemark.schema_registry): type spellings, the value fields against the output table's columns
under ``schema_changes``, the Avro schemas a batch freezes (from a fake SchemaSource), the pipeline
rules of ``value_format: avro``, and the client's error mapping against a real local HTTP server."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tidemark import schema_registry
from tidemark.config import parse_pipeline
from tidemark.connections import Connection
from tidemark.errors import (
    ConfigError,
    SchemaChangeError,
    SchemaRegistryError,
    SchemaRegistryUnavailableError,
    is_transient,
)
from tidemark.records import Field
from tidemark.schema_registry import RegisteredSchema, RegistryClient, client_for, registry_url
from tidemark.schemas import (
    FrozenSchemas,
    SchemaChanges,
    check_changes,
    compare,
    delta_type,
    freeze_avro,
    normalize_type,
    subject_of,
)

pytestmark = pytest.mark.unit

# --- type spellings --------------------------------------------------------------------------------


@pytest.mark.parametrize(("ddl", "normal"), [
    ("bigint", "long"), ("BIGINT", "long"), ("long", "long"),
    ("int", "integer"), ("integer", "integer"), ("smallint", "short"), ("tinyint", "byte"), ("real", "float"),
    ("float", "float"), ("double", "double"), ("string", "string"), ("boolean", "boolean"),
    ("date", "date"), ("timestamp", "timestamp"), ("timestamp_ntz", "timestamp_ntz"), ("binary", "binary"),
    ("decimal(12, 2)", "decimal(12,2)"), ("Decimal(12,2)", "decimal(12,2)"),
    ("array<int>", "array<integer>"), ("map<string, bigint>", "map<string,long>"),
    ("struct<`a`: bigint, `b`: array<int>>", "struct<a:long,b:array<integer>>"),
])
def test_normalize_type_gives_one_spelling_per_type(ddl, normal):
    assert normalize_type(ddl) == normal


def _col(name: str, spec, nullable: bool = True) -> dict:
    """A field of a Delta log's schema string (what ``DeltaTable.schema().to_json()`` holds)."""
    return {"name": name, "type": spec, "nullable": nullable, "metadata": {}}


@pytest.mark.parametrize(("spec", "normal"), [
    ("long", "long"), ("integer", "integer"), ("short", "short"), ("byte", "byte"), ("string", "string"),
    ("double", "double"), ("timestamp", "timestamp"), ("decimal(12,2)", "decimal(12,2)"),
    ({"type": "array", "elementType": "long", "containsNull": True}, "array<long>"),
    ({"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True}, "map<string,integer>"),
    ({"type": "struct", "fields": [_col("city", "string"), _col("zip", "integer")]},
     "struct<city:string,zip:integer>"),
    ({"type": "array", "containsNull": True,
      "elementType": {"type": "struct", "fields": [_col("sku", "string"), _col("qty", "long"),
                                                   _col("tags", {"type": "array", "elementType": "string",
                                                                 "containsNull": True})]}},
     "array<struct<sku:string,qty:long,tags:array<string>>>"),
    ({"type": "map", "keyType": "string", "valueContainsNull": True,
      "valueType": {"type": "struct", "fields": [_col("n", "long")]}}, "map<string,struct<n:long>>"),
])
def test_delta_type_reads_the_delta_logs_type(spec, normal):
    assert normalize_type(delta_type(spec)) == normal


def test_a_delta_column_and_the_same_spark_ddl_are_equal():
    """Spark writes ``struct<`a`:bigint,...>`` and the Delta log says ``{"type": "struct", ...}``."""
    spec = {"type": "struct", "fields": [_col("id", "long"), _col("lines", {
        "type": "array", "containsNull": True, "elementType": {"type": "struct", "fields": [
            _col("sku", "string"), _col("qty", "integer"), _col("price", "decimal(10,2)")]}})]}
    ddl = "struct<`id`:bigint,`lines`:array<struct<`sku`:string,`qty`:int,`price`:decimal(10,2)>>>"
    assert normalize_type(delta_type(spec)) == normalize_type(ddl)


def test_a_struct_columns_type_keeps_its_field_names_for_a_cast():
    spec = {"type": "struct", "fields": [_col("zipCode", "string")]}
    assert delta_type(spec) == "struct<`zipCode`:string>"


def test_a_nested_field_name_with_capitals_is_not_a_type_change():
    spec = {"type": "struct", "fields": [_col("zipCode", "string"), _col("int", "integer")]}
    ddl = "struct<`zipCode`:string,`int`:int>"  # avro_schemas.spark_type of a record {zipCode, int}
    assert compare([Field("address", ddl)], {"address": delta_type(spec)}) == SchemaChanges()


# --- compare and check_changes --------------------------------------------------------------------

TIDEMARK_COLUMNS = {"kafka_topic": "string", "kafka_partition": "integer", "kafka_offset": "long",
                    "kafka_timestamp": "timestamp", "kafka_key": "binary",
                    "kafka_headers": "array<struct<key:string,value:binary>>", "ingest_batch_id": "long",
                    "ingested_at": "timestamp", "kafka_date": "date"}


def table(**payload: str) -> dict[str, str]:
    """An output table's columns as ``table_columns`` returns them: Tidemark's own and the payload's."""
    return {**TIDEMARK_COLUMNS, **{n: delta_type(t) for n, t in payload.items()}}


def test_compare_finds_added_removed_and_retyped_fields():
    fields = [Field("order_id", "bigint"), Field("amount", "string"), Field("region", "string", required=False)]
    changes = compare(fields, table(order_id="long", amount="double", note="string"))
    assert changes == SchemaChanges(added=("region",), removed=("note",), retyped={"amount": ("double", "string")})


def test_compare_ignores_tidemarks_own_columns_and_type_synonyms():
    fields = [Field("order_id", "bigint"), Field("qty", "int"), Field("price", "decimal(10, 2)"),
              Field("small", "smallint"), Field("ratio", "real")]
    columns = table(order_id="long", qty="integer", price="decimal(10,2)", small="short", ratio="float")
    assert compare(fields, columns) == SchemaChanges()
    # A raw pipeline's ``value`` column is Tidemark's too: a JSON schema is not "removing" it.
    assert compare([Field("order_id", "bigint")], {**table(order_id="long"), "value": "binary"}) == SchemaChanges()


def test_compare_against_a_table_of_tidemark_columns_only_adds_every_field():
    fields = [Field("a", "string"), Field("b", "double")]
    assert compare(fields, TIDEMARK_COLUMNS) == SchemaChanges(added=("a", "b"))


def test_additive_refuses_and_names_every_removed_or_retyped_field():
    changes = SchemaChanges(added=("region",), removed=("note", "memo"),
                            retyped={"amount": ("double", "string"), "qty": ("long", "integer")})
    with pytest.raises(SchemaChangeError) as err:
        check_changes("orders", "/lake/orders", changes, "additive", "value_schema")
    message = str(err.value)
    assert message.startswith("pipeline 'orders': the value schema (value_schema) does not fit the output table "
                              "/lake/orders: ")
    for expected in ("field 'note' is no longer in the schema", "field 'memo' is no longer in the schema",
                     "field 'amount' is string in the schema but double in the table",
                     "field 'qty' is integer in the schema but long in the table",
                     "Nothing was frozen", "set 'schema_changes: lenient'"):
        assert expected in message
    assert "region" not in message  # an added field is no problem
    assert isinstance(err.value, ConfigError) and not is_transient(err.value)


def test_additive_takes_added_fields_and_lenient_returns_the_casts():
    assert check_changes("p", "/t", SchemaChanges(added=("region",)), "additive", "value_schema") == {}
    assert check_changes("p", "/t", SchemaChanges(), "additive", "value_schema") == {}
    changes = SchemaChanges(added=("region",), removed=("note",),
                            retyped={"amount": ("double", "string"), "qty": ("long", "integer")})
    assert check_changes("p", "/t", changes, "lenient", "value_schema") == {"amount": "double", "qty": "long"}
    assert check_changes("p", "/t", SchemaChanges(removed=("note",)), "lenient", "value_schema") == {}


# --- freeze_avro with a fake registry -------------------------------------------------------------

def record(*fields: dict) -> dict:
    return {"type": "record", "name": "Order", "namespace": "shop", "fields": list(fields)}


ORDER_ID, AMOUNT = {"name": "order_id", "type": "long"}, {"name": "amount", "type": "double"}
V1 = record(ORDER_ID, AMOUNT)
V2 = record(ORDER_ID, AMOUNT, {"name": "region", "type": ["null", "string"], "default": None})
V3_NO_DEFAULT = record(ORDER_ID, AMOUNT, {"name": "country", "type": "string"})


def registered(version: int, schema_id: int, schema: dict | str, schema_type: str = "AVRO",
               subject: str = "orders-value") -> RegisteredSchema:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return RegisteredSchema(subject, version, schema_id, text, schema_type)


class FakeSource:
    """A SchemaSource that answers the same versions for any subject and remembers what it was asked."""

    def __init__(self, *schemas: RegisteredSchema) -> None:
        self.schemas = list(schemas)
        self.asked: list[str] = []

    def versions(self, subject: str) -> list[RegisteredSchema]:
        self.asked.append(subject)
        return list(self.schemas)


def test_the_latest_version_is_the_reader_and_every_readable_version_a_writer():
    source = FakeSource(registered(2, 12, V2), registered(1, 11, V1))  # any order
    frozen = freeze_avro("orders", "orders-value", None, source)
    assert source.asked == ["orders-value"]
    assert (frozen.subject, frozen.reader_version, frozen.reader_id) == ("orders-value", 2, 12)
    assert json.loads(frozen.reader) == V2
    assert {k: json.loads(v) for k, v in frozen.writers.items()} == {"11": V1, "12": V2}
    assert frozen.unreadable == {}
    assert frozen.fields() == (Field("order_id", "bigint"), Field("amount", "double"),
                               Field("region", "string", required=False))


def test_a_pinned_version_is_the_reader():
    frozen = freeze_avro("orders", "orders-value", 1, FakeSource(registered(1, 11, V1), registered(2, 12, V2)))
    assert (frozen.reader_version, frozen.reader_id) == (1, 11)
    assert [f.name for f in frozen.fields()] == ["order_id", "amount"]
    assert sorted(frozen.writers) == ["11", "12"]  # v2's extra field is skipped when read as v1


def test_an_unknown_pinned_version_names_the_subjects_versions():
    source = FakeSource(registered(1, 11, V1), registered(2, 12, V2))
    with pytest.raises(SchemaRegistryError, match=r"^pipeline 'orders': value_schema_version 5 is not a version of "
                                                  r"subject 'orders-value' \(versions: 1, 2\)$"):
        freeze_avro("orders", "orders-value", 5, source)


def test_a_subject_without_an_avro_schema_is_refused():
    for source in (FakeSource(), FakeSource(registered(1, 11, '{"type": "object"}', "JSON"),
                                            registered(2, 12, "syntax = 'proto3';", "PROTOBUF"))):
        with pytest.raises(SchemaRegistryError, match=r"subject 'orders-value' has no Avro schema in the Schema "
                                                      r"Registry; register the value schema first"):
            freeze_avro("orders", "orders-value", None, source)


def test_versions_of_another_schema_type_are_left_out():
    source = FakeSource(registered(1, 11, V1, "avro"), registered(2, 12, '{"type": "object"}', "JSON"))
    frozen = freeze_avro("orders", "orders-value", None, source)
    assert (frozen.reader_version, list(frozen.writers), frozen.unreadable) == (1, ["11"], {})


def test_an_incompatible_writer_is_unreadable_with_a_reason_naming_the_field():
    source = FakeSource(registered(1, 11, V1), registered(2, 12, V2), registered(3, 13, V3_NO_DEFAULT))
    frozen = freeze_avro("orders", "orders-value", None, source)
    assert frozen.reader_version == 3 and sorted(frozen.writers) == ["13"]
    assert sorted(frozen.unreadable) == ["11", "12"]
    assert frozen.unreadable["11"] == ("schema id 11 (version 1) cannot be read into the reader schema (version 3): "
                                       "field 'country': missing in the writer schema and has no default in the "
                                       "reader schema")
    assert "field 'country'" in frozen.unreadable["12"]


def test_a_malformed_writer_schema_is_unreadable_not_fatal():
    frozen = freeze_avro("orders", "orders-value", None, FakeSource(registered(1, 11, "{not json"),
                                                                    registered(2, 12, V1)))
    assert list(frozen.writers) == ["12"]
    assert frozen.unreadable["11"].startswith("schema id 11 (version 1) cannot be read into the reader schema")
    assert "not JSON" in frozen.unreadable["11"]


@pytest.mark.parametrize(("reader", "message"), [
    (record(ORDER_ID, {"name": "kafka_offset", "type": "long"}),
     r"field name 'kafka_offset' clashes with a column Tidemark adds"),
    (record(ORDER_ID, {"name": "Ingested_At", "type": "string"}),
     r"field name 'Ingested_At' clashes with a column Tidemark adds"),
    (record(ORDER_ID, {"name": "value", "type": "bytes"}), r"field name 'value' clashes with a column Tidemark adds"),
    (record(ORDER_ID, {"name": "either", "type": ["long", "string"]}), r"unions of several types are not supported"),
    ({"type": "string"}, r"a value schema must be an Avro record"),
])
def test_a_reader_schema_that_cannot_be_columns_is_a_registry_error(reader, message):
    source = FakeSource(registered(1, 11, V1), registered(2, 12, reader))
    with pytest.raises(SchemaRegistryError, match=r"^pipeline 'orders': the (value )?reader schema \(subject "
                                                  r"'orders-value' version 2, id 12\) cannot be written as "
                                                  r"columns: .*" + message):
        freeze_avro("orders", "orders-value", None, source)


def test_frozen_schemas_round_trip_through_json():
    source = FakeSource(registered(1, 11, V1), registered(2, 12, V2), registered(3, 13, V3_NO_DEFAULT))
    frozen = freeze_avro("orders", "orders-value", 2, source)
    assert frozen.unreadable == {} and sorted(frozen.writers) == ["11", "12", "13"]
    text = frozen.to_json()
    assert sorted(json.loads(text)) == ["reader", "reader_id", "reader_version", "subject", "unreadable", "writers"]
    again = FrozenSchemas.from_json(text)
    assert again == frozen and again.fields() == frozen.fields()
    broken = freeze_avro("orders", "orders-value", None, source)
    assert FrozenSchemas.from_json(broken.to_json()) == broken and broken.unreadable


def test_subject_of_is_value_subject_or_the_topic_name_strategy():
    assert subject_of(None, ["orders"]) == "orders-value"
    assert subject_of("shop.Order", ["orders"]) == "shop.Order"
    assert subject_of("shop.Order", ["a", "b"]) == "shop.Order"


# --- the pipeline rules of value_format: avro ---------------------------------------------------

def pipeline(**keys):
    return parse_pipeline({"name": "p", "table": "t", **keys}, "test.yaml")


def refused(**keys) -> str:
    with pytest.raises(ConfigError) as err:
        pipeline(**keys)
    assert str(err.value).startswith("test.yaml: ")
    return str(err.value)


def test_avro_with_several_topics_or_a_pattern_needs_a_value_subject():
    expected = ("value_format 'avro' reads the subject '<topic>-value' of a one-topic pipeline; with several "
                "topics or a topic_pattern, name the subject with value_subject")
    assert expected in refused(topics=["a", "b"], value_format="avro")
    assert expected in refused(topic_pattern="orders.*", value_format="avro")
    config = pipeline(topics=["a", "b"], value_format="avro", value_subject="orders-value")
    assert subject_of(config.value_subject, config.topics) == "orders-value"
    one = pipeline(topics=["a"], value_format="avro", value_schema_version=3)
    assert (one.value_subject, one.value_schema_version, one.schema_changes) == (None, 3, "additive")


def test_value_subject_and_version_are_avro_only():
    expected = "value_subject and value_schema_version are only used with value_format: avro"
    assert expected in refused(topics=["a"], value_format="json", value_schema={"id": "bigint"}, value_subject="s")
    assert expected in refused(topics=["a"], value_schema_version=2)


def test_value_schema_is_json_only():
    message = refused(topics=["a"], value_format="avro", value_schema={"id": "bigint"})
    assert "value_schema is only used with value_format: json (Avro schemas come from the Schema Registry)" in message


def test_schema_changes_is_additive_or_lenient():
    assert pipeline(topics=["a"], schema_changes="lenient").schema_changes == "lenient"
    assert "'schema_changes': Input should be 'additive' or 'lenient'" in refused(topics=["a"], schema_changes="all")


def test_avro_partition_columns_are_checked_at_plan_time_not_in_the_file():
    assert pipeline(topics=["a"], value_format="avro", partition_by=["region"]).partition_by == ["region"]


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
