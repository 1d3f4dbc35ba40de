"""Object-store settings from an `aws` connection, and the delta-rs options they become."""

from __future__ import annotations

import pytest

from tidemark import storage
from tidemark.connections import Connection
from tidemark.errors import ConfigError
from tidemark.storage import ObjectStore


def test_the_amazon_providers_conventions():
    store = ObjectStore.from_connection(Connection(
        "aws_default", "aws", login="AKIA1", password="s3cret",
        extra={"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"}))
    assert store.delta_rs_options() == {
        "AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "s3cret", "conditional_put": "etag"}
    assert "s3cret" not in repr(store)
    assert ObjectStore.from_json(store.to_json()) == store


def test_no_keys_means_the_default_credential_chain_and_aws_itself():
    options = ObjectStore.from_connection(Connection("aws_default", "aws")).delta_rs_options()
    assert options == {"AWS_REGION": "us-east-1", "conditional_put": "etag"}


@pytest.mark.parametrize(("conn", "message"), [
    (Connection("c", "aws", login="AKIA1"), "an access key but no secret"),
    (Connection("c", "aws", password="x"), "a secret but no access key"),
    (Connection("c", "kafka"), "needs a connection of type 'aws'"),
    (Connection("c", "aws", extra={"endpoint": "http://x"}), r"unknown extra field\(s\) endpoint"),
    (Connection("c", "aws", extra={"endpoint_url": "minio:9000"}),
     r"connection 'c': endpoint_url 'minio:9000' needs a scheme: http://minio:9000 \(or https://\)"),
])
def test_broken_connections_say_what_to_fix(conn, message):
    with pytest.raises(ConfigError, match=message):
        ObjectStore.from_connection(conn)


def test_settings_that_turn_off_put_if_absent_commits_are_refused():
    with pytest.raises(ConfigError, match="turns off put-if-absent commits"):
        storage.check_safe_commits({"conditional_put": "disabled"}, "table s3://lake/t")
    with pytest.raises(ConfigError, match="AWS_S3_ALLOW_UNSAFE_RENAME"):
        storage.check_safe_commits({"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}, "table s3://lake/t")


def test_spellings_and_local_tables():
    assert storage.delta_rs_uri("s3a://lake/t") == "s3://lake/t" and storage.spark_uri("s3://lake/t") == "s3a://lake/t"
    assert storage.is_object_store("S3A://lake/t") and not storage.is_object_store("/data/lake/t")
    assert storage.delta_options("/data/lake/t", ObjectStore()) is None


class Resolver:
    """A ConnectionResolver over a dict, recording what it was asked to mask."""

    def __init__(self, **conns: Connection):
        self.conns, self.masked = conns, []

    def get(self, conn_id, pipeline=None):
        if conn_id not in self.conns:
            raise ConfigError(f"connection '{conn_id}' is not defined", pipeline=pipeline)
        return self.conns[conn_id]

    def mask(self, secrets):
        self.masked += list(secrets)


MINIO = Connection("aws_default", "aws", login="AKIA1", password="s3cret",
                   extra={"endpoint_url": "http://127.0.0.1:9000"})


def test_the_connection_is_read_only_when_a_table_is_on_object_storage():
    resolver = Resolver(aws_default=MINIO)
    assert storage.store_for(["/lake/t", "/lake/t_dl", "/lake/_tidemark/offsets"], resolver) is None
    assert resolver.masked == []
    store = storage.store_for(["/lake/t", "s3a://lake/_tidemark/offsets"], resolver, pipeline="p")
    assert store.access_key_id == "AKIA1"
    assert resolver.masked == ["s3cret"]  # the secret is registered with the log masker


def test_each_table_is_opened_with_the_store_it_is_handed():
    """No process-wide store: the options of one table's store never reach another's."""
    one = ObjectStore("AKIA1", "s3cret-1", endpoint_url="http://one:9000")
    two = ObjectStore("AKIA2", "s3cret-2", endpoint_url="https://two:9000")
    assert storage.delta_options("s3a://lake/t", one)["AWS_ENDPOINT_URL"] == "http://one:9000"
    assert storage.delta_options("s3://other/t", two)["AWS_SECRET_ACCESS_KEY"] == "s3cret-2"
    assert "AWS_ACCESS_KEY_ID" not in storage.delta_options("s3://lake/t", None)  # the default chain


def test_a_missing_default_connection_means_the_aws_chain_but_a_named_one_must_exist(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    assert storage.object_store(Resolver(), "aws_default", "p") == ObjectStore(region="eu-central-1")
    with pytest.raises(ConfigError, match="connection 'lake_store' is not defined"):
        storage.object_store(Resolver(), "lake_store", "p")


def test_spark_conf_sets_s3a_and_the_put_if_absent_log_store_and_keys_only_on_request():
    store = ObjectStore.from_connection(MINIO)
    public = storage.spark_conf(store, secrets=False)
    assert public["spark.delta.logStore.s3a.impl"] == public["spark.delta.logStore.s3.impl"] == storage.LOG_STORE
    assert public["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert public["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert public["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert public["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert "s3cret" not in public.values()
    private = storage.spark_conf(store, secrets=True)
    assert private["spark.hadoop.fs.s3a.access.key"] == "AKIA1"
    assert private["spark.hadoop.fs.s3a.secret.key"] == "s3cret"
    aws = storage.spark_conf(ObjectStore(region="eu-west-1"), secrets=True)
    assert "spark.hadoop.fs.s3a.endpoint" not in aws and "spark.hadoop.fs.s3a.access.key" not in aws


def test_a_spark_log_store_that_is_not_put_if_absent_is_refused_on_object_storage():
    safe = storage.spark_conf(None, secrets=False)
    storage.check_spark_commits(safe, ["s3a://lake/t"], "pipeline 'p'")
    storage.check_spark_commits({}, ["/lake/t", None], "pipeline 'p'")  # local tables: nothing to check
    dynamo = {**safe, "spark.delta.logStore.s3a.impl": "io.delta.storage.S3DynamoDBLogStore"}
    storage.check_spark_commits(dynamo, ["s3://lake/t"], "pipeline 'p'")
    single = {**safe, "spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore"}
    with pytest.raises(ConfigError, match=r"pipeline 'p': table s3a://lake/t is on object storage.*"
                                          r"S3SingleDriverLogStore.*Remove spark.delta.logStore.s3a.impl"):
        storage.check_spark_commits(single, ["s3a://lake/t"], "pipeline 'p'")
    with pytest.raises(ConfigError, match="Delta default"):
        storage.check_spark_commits({}, ["s3://lake/t"], "pipeline 'p'")


def test_an_endpoint_that_does_not_answer_is_an_outage_the_task_retries_not_a_wrong_location():
    """An S3 endpoint refusing connections (a closed port: nothing listens) is what a store restarting looks like;
    `make chaos` saw ingest jobs fail for good on it. It is transient and says what to check if it lasts."""
    import socket

    from tidemark.errors import StorageLocationError, StorageUnavailableError

    with socket.socket() as sock:  # a port that was free a moment ago and that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = ObjectStore(endpoint_url=f"http://127.0.0.1:{port}", access_key_id="k", secret_access_key="s",
                        region="us-east-1")
    with pytest.raises(StorageUnavailableError, match=r"does not answer.*retr.*endpoint_url") as caught:
        storage.check_location("s3a://lake/orders", store, "orders")
    assert not isinstance(caught.value, StorageLocationError)
    assert caught.value.fields["pipeline"] == "orders" and caught.value.fields["location"] == "s3a://lake/orders"


@pytest.mark.parametrize("status", [301, 400])
def test_a_store_that_answers_for_another_region_is_a_wrong_setting_not_an_outage(status):
    """S3 answers 400 (AuthorizationHeaderMalformed) or 301 (PermanentRedirect) to a request signed for
    another region: a setting to fix, so terminal, and the message names region_name."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tidemark.errors import StorageLocationError

    class WrongRegion(BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(status)
            self.send_header("x-amz-bucket-region", "eu-west-1")  # as S3 names the bucket's own region
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), WrongRegion)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = ObjectStore(endpoint_url=f"http://127.0.0.1:{server.server_address[1]}", access_key_id="k",
                            secret_access_key="s", region="us-east-1")
        with pytest.raises(StorageLocationError, match=rf"answered {status} .*bucket 'lake'.*region \(us-east-1\) "
                                                       r"is most likely not the bucket's. Set region_name") as caught:
            storage.check_location("s3a://lake/orders", store, "orders")
        assert not caught.value.transient
    finally:
        server.shutdown()
        server.server_close()


def test_a_folder_a_failed_first_batch_left_is_no_table(tmp_path):
    """Issue 61, 5: a first batch that failed in Spark's write leaves part files and a ``_delta_log`` without a
    commit (``_staged_commits`` only). Every Tidemark reader opens tables through ``open_table``, which takes it as
    no table (delta-rs says "No files in log segment"), so the next run creates the table (docs/OPERATIONS.md)."""
    half = tmp_path / "orders"
    (half / "_delta_log" / "_staged_commits").mkdir(parents=True)
    (half / "part-00000-a.snappy.parquet").write_bytes(b"PAR1")
    assert storage.open_table(str(half)) is None
