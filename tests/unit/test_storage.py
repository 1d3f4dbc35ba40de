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
    assert storage.delta_options("/data/lake/t") is None
