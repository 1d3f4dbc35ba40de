"""The local S3-compatible server (`make storage-up`: moto on 127.0.0.1:$S3_PORT, bucket `lake`) honours
what exactly-once on object storage rests on, as AWS does.

- S3 conditional PUT (`If-None-Match: *`): a second PUT of a key fails with 412 and the first object
  stays; racing writers: exactly one wins.
- DynamoDB conditional PutItem (`attribute_not_exists`): the second writer is rejected; racing writers:
  exactly one wins.
- delta-rs on `s3://`: commits are put-if-absent (conditional PUT, its default since 1.0), so a writer
  committing a version that another writer already took fails with CommitFailedError instead of
  overwriting it.

Spark on the server: test_object_store_server_s3a.py (S3A) and test_object_store_server_log_store.py
(Tidemark's LogStore). Needs the server: `make storage-up` (or scripts/storage.sh up). Without it every test here fails.
"""

from __future__ import annotations

import uuid

import pytest

from tests.integration.object_store import (
    BUCKET,
    RACE_TRIALS,
    RACERS,
    client,
    delta_rs_options,
    error_code,
    race,
)

pytestmark = pytest.mark.integration


# --- S3: conditional PUT ------------------------------------------------------------------------------


def test_put_if_none_match_rejects_the_second_writer_and_keeps_the_first_object(object_store, prefix):
    from botocore.exceptions import ClientError

    s3, key = object_store["s3"], f"{prefix}/_delta_log/00000000000000000000.json"
    first = s3.put_object(Bucket=BUCKET, Key=key, Body=b"first writer", IfNoneMatch="*")
    with pytest.raises(ClientError) as rejected:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"second writer", IfNoneMatch="*")
    assert error_code(rejected.value) == ("PreconditionFailed", 412)
    stored = s3.get_object(Bucket=BUCKET, Key=key)
    assert stored["Body"].read() == b"first writer"
    assert stored["ETag"] == first["ETag"]


def test_put_if_match_replaces_only_the_expected_version(object_store, prefix):
    """If-Match (compare-and-swap on the ETag), what object_store's `conditional_put=etag` also relies on."""
    from botocore.exceptions import ClientError

    s3, key = object_store["s3"], f"{prefix}/pointer"
    old = s3.put_object(Bucket=BUCKET, Key=key, Body=b"v1")["ETag"]
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"v2", IfMatch=old)
    with pytest.raises(ClientError) as rejected:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"v3 from a stale reader", IfMatch=old)
    assert error_code(rejected.value) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"v2"


def test_racing_conditional_puts_have_exactly_one_winner(object_store, prefix):
    from botocore.exceptions import ClientError

    clients = [client("s3") for _ in range(RACERS)]
    for trial in range(RACE_TRIALS):
        key = f"{prefix}/race/{trial}.json"

        def attempt(i: int, key=key):
            try:
                clients[i].put_object(Bucket=BUCKET, Key=key, Body=f"writer {i}".encode(), IfNoneMatch="*")
                return "won"
            except ClientError as exc:
                return error_code(exc)

        results = race(attempt)
        winners = [i for i, r in enumerate(results) if r == "won"]
        assert len(winners) == 1, f"trial {trial}: {results}"
        assert all(r == ("PreconditionFailed", 412) for r in results if r != "won"), results
        body = object_store["s3"].get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert body == f"writer {winners[0]}".encode()


def test_multipart_upload_completion_honours_if_none_match(object_store, prefix):
    """Large commits (and S3A's multipart writes) finish with CompleteMultipartUpload: same rule."""
    from botocore.exceptions import ClientError

    s3, key = object_store["s3"], f"{prefix}/big.json"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"already here", IfNoneMatch="*")
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    part = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1, Body=b"x" * 1024)
    with pytest.raises(ClientError) as rejected:
        s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload, IfNoneMatch="*",
                                     MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]})
    assert error_code(rejected.value) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"already here"


# --- DynamoDB: conditional PutItem --------------------------------------------------------------------


@pytest.fixture
def lock_table(object_store):
    """A table with the key schema of Delta's S3DynamoDBLogStore (tablePath HASH, fileName RANGE)."""
    ddb, name = object_store["dynamodb"], f"delta_log_{uuid.uuid4().hex[:8]}"
    ddb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "tablePath", "AttributeType": "S"},
                                           {"AttributeName": "fileName", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "tablePath", "KeyType": "HASH"},
                                {"AttributeName": "fileName", "KeyType": "RANGE"}])
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    yield name
    ddb.delete_table(TableName=name)


def _entry(table_path: str, file_name: str, writer: str) -> dict:
    return {"tablePath": {"S": table_path}, "fileName": {"S": file_name}, "tempPath": {"S": f".tmp/{writer}"},
            "complete": {"S": "false"}}


def test_conditional_put_item_rejects_the_second_writer(object_store, lock_table):
    from botocore.exceptions import ClientError

    ddb, key = object_store["dynamodb"], "s3://lake/t"
    ddb.put_item(TableName=lock_table, Item=_entry(key, "00000000000000000001.json", "a"),
                 ConditionExpression="attribute_not_exists(fileName)")
    with pytest.raises(ClientError) as rejected:
        ddb.put_item(TableName=lock_table, Item=_entry(key, "00000000000000000001.json", "b"),
                     ConditionExpression="attribute_not_exists(fileName)")
    assert error_code(rejected.value) == ("ConditionalCheckFailedException", 400)
    item = ddb.get_item(TableName=lock_table, ConsistentRead=True,
                        Key={"tablePath": {"S": key}, "fileName": {"S": "00000000000000000001.json"}})["Item"]
    assert item["tempPath"] == {"S": ".tmp/a"}


def test_racing_conditional_put_items_have_exactly_one_winner(object_store, lock_table):
    from botocore.exceptions import ClientError

    clients = [client("dynamodb") for _ in range(RACERS)]
    for trial in range(RACE_TRIALS):
        key = f"s3://lake/race-{trial}"

        def attempt(i: int, key=key):
            try:
                clients[i].put_item(TableName=lock_table, Item=_entry(key, "00000000000000000001.json", str(i)),
                                    ConditionExpression="attribute_not_exists(fileName)")
                return "won"
            except ClientError as exc:
                return error_code(exc)

        results = race(attempt)
        winners = [i for i, r in enumerate(results) if r == "won"]
        assert len(winners) == 1, f"trial {trial}: {results}"
        item = object_store["dynamodb"].get_item(
            TableName=lock_table, ConsistentRead=True,
            Key={"tablePath": {"S": key}, "fileName": {"S": "00000000000000000001.json"}})["Item"]
        assert item["tempPath"] == {"S": f".tmp/{winners[0]}"}


def test_delta_rs_commits_are_put_if_absent(object_store, prefix):
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, write_deltalake
    from deltalake.exceptions import CommitFailedError

    uri, options = f"s3://{BUCKET}/{prefix}/t", delta_rs_options()
    write_deltalake(uri, pa.table({"x": [0]}), storage_options=options)
    write_deltalake(uri, pa.table({"x": [1]}), mode="append", storage_options=options)
    assert DeltaTable(uri, storage_options=options).version() == 1

    # Two writers hold version 1 and both commit version 2: the second one's PUT of
    # _delta_log/00000000000000000002.json finds the key taken. With no retry it fails; it never overwrites.
    first, second = DeltaTable(uri, storage_options=options), DeltaTable(uri, storage_options=options)
    no_retry = CommitProperties(max_commit_retries=0)
    write_deltalake(first, pa.table({"x": [2]}), mode="append", commit_properties=no_retry)
    with pytest.raises(CommitFailedError):
        write_deltalake(second, pa.table({"x": [99]}), mode="append", commit_properties=no_retry)

    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table()["x"].to_pylist()) == [0, 1, 2]


def test_delta_rs_same_batch_from_two_writers_commits_once(object_store, prefix):
    """Idempotency markers (Spark's txnAppId/txnVersion) on S3: a stale writer of the same batch loses."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    uri, options = f"s3://{BUCKET}/{prefix}/t", delta_rs_options()
    write_deltalake(uri, pa.table({"x": [0]}), storage_options=options)
    first, second = DeltaTable(uri, storage_options=options), DeltaTable(uri, storage_options=options)

    def batch_7() -> CommitProperties:
        return CommitProperties(app_transactions=[Transaction(app_id="pipeline", version=7)])

    write_deltalake(first, pa.table({"x": [1]}), mode="append", commit_properties=batch_7())
    with pytest.raises(CommitFailedError, match="[Cc]oncurrent"):
        write_deltalake(second, pa.table({"x": [1]}), mode="append", commit_properties=batch_7())
    table = DeltaTable(uri, storage_options=options)
    assert sorted(table.to_pyarrow_table()["x"].to_pylist()) == [0, 1]
    assert table.transaction_version("pipeline") == 7
