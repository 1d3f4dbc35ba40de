"""The local S3-compatible server (`make storage-up`: moto on 127.0.0.1:$S3_PORT, bucket `lake`) honours
what exactly-once on object storage rests on, as AWS does, and both Delta engines work on it.

- S3 conditional PUT (`If-None-Match: *`): a second PUT of a key fails with 412 and the first object
  stays; racing writers: exactly one wins.
- DynamoDB conditional PutItem (`attribute_not_exists`): the second writer is rejected; racing writers:
  exactly one wins.
- delta-rs on `s3://`: commits are put-if-absent (conditional PUT, its default since 1.0), so a writer
  committing a version that another writer already took fails with CommitFailedError instead of
  overwriting it.
- Spark (S3A from jvm/spark/pom.xml) on `s3a://`: writes a Delta table that delta-rs reads back under the
  `s3://` spelling, and reads one that delta-rs wrote. S3A's conditional create (Hadoop 3.5.0) is
  put-if-absent; its plain `create(overwrite=false)`, which Delta's stock S3SingleDriverLogStore uses,
  is not (see docs/OBJECT_STORAGE_NOTES.md: no stock multi-writer Delta log store for Spark here).

Needs the server: `make storage-up` (or scripts/storage.sh up). Without it every test here fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PORT = int(os.environ.get("S3_PORT", "9000"))
ENDPOINT = f"http://127.0.0.1:{PORT}"
BUCKET = os.environ.get("S3_BUCKET", "lake")
ACCESS_KEY = os.environ.get("S3_ACCESS_KEY", "tidemark")
SECRET_KEY = os.environ.get("S3_SECRET_KEY", "tidemark-local")
REGION = os.environ.get("S3_REGION", "us-east-1")
RACE_TRIALS, RACERS = 20, 8


def _client(service: str):
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=3, read_timeout=30, retries={"max_attempts": 1},
                    max_pool_connections=RACERS * 2, s3={"addressing_style": "path"})
    return boto3.client(service, endpoint_url=ENDPOINT, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY, config=config)


def _error_code(exc) -> tuple[str, int]:
    return exc.response["Error"]["Code"], exc.response["ResponseMetadata"]["HTTPStatusCode"]


@pytest.fixture(scope="session")
def object_store():
    """boto3 S3 and DynamoDB clients on the running server; fails (never skips) when none answers."""
    try:
        s3 = _client("s3")
        s3.head_bucket(Bucket=BUCKET)
    except Exception as exc:  # any failure means the same thing here
        pytest.fail(f"no S3-compatible server with the bucket '{BUCKET}' answers at {ENDPOINT} ({exc}); "
                    f"run `make storage-up` (S3_PORT={PORT}) first")
    return {"s3": s3, "dynamodb": _client("dynamodb")}


@pytest.fixture
def prefix() -> str:
    return f"tests/{uuid.uuid4().hex[:12]}"


def _race(attempt, racers: int = RACERS) -> list:
    """Run ``attempt(i)`` in ``racers`` threads released together; return their results."""
    barrier, results, lock = threading.Barrier(racers), [None] * racers, threading.Lock()

    def run(i: int) -> None:
        barrier.wait()
        outcome = attempt(i)
        with lock:
            results[i] = outcome

    threads = [threading.Thread(target=run, args=(i,)) for i in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


# --- S3: conditional PUT ------------------------------------------------------------------------------


def test_put_if_none_match_rejects_the_second_writer_and_keeps_the_first_object(object_store, prefix):
    from botocore.exceptions import ClientError

    s3, key = object_store["s3"], f"{prefix}/_delta_log/00000000000000000000.json"
    first = s3.put_object(Bucket=BUCKET, Key=key, Body=b"first writer", IfNoneMatch="*")
    with pytest.raises(ClientError) as rejected:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"second writer", IfNoneMatch="*")
    assert _error_code(rejected.value) == ("PreconditionFailed", 412)
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
    assert _error_code(rejected.value) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"v2"


def test_racing_conditional_puts_have_exactly_one_winner(object_store, prefix):
    from botocore.exceptions import ClientError

    clients = [_client("s3") for _ in range(RACERS)]
    for trial in range(RACE_TRIALS):
        key = f"{prefix}/race/{trial}.json"

        def attempt(i: int, key=key):
            try:
                clients[i].put_object(Bucket=BUCKET, Key=key, Body=f"writer {i}".encode(), IfNoneMatch="*")
                return "won"
            except ClientError as exc:
                return _error_code(exc)

        results = _race(attempt)
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
    assert _error_code(rejected.value) == ("PreconditionFailed", 412)
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
    assert _error_code(rejected.value) == ("ConditionalCheckFailedException", 400)
    item = ddb.get_item(TableName=lock_table, ConsistentRead=True,
                        Key={"tablePath": {"S": key}, "fileName": {"S": "00000000000000000001.json"}})["Item"]
    assert item["tempPath"] == {"S": ".tmp/a"}


def test_racing_conditional_put_items_have_exactly_one_winner(object_store, lock_table):
    from botocore.exceptions import ClientError

    clients = [_client("dynamodb") for _ in range(RACERS)]
    for trial in range(RACE_TRIALS):
        key = f"s3://lake/race-{trial}"

        def attempt(i: int, key=key):
            try:
                clients[i].put_item(TableName=lock_table, Item=_entry(key, "00000000000000000001.json", str(i)),
                                    ConditionExpression="attribute_not_exists(fileName)")
                return "won"
            except ClientError as exc:
                return _error_code(exc)

        results = _race(attempt)
        winners = [i for i, r in enumerate(results) if r == "won"]
        assert len(winners) == 1, f"trial {trial}: {results}"
        item = object_store["dynamodb"].get_item(
            TableName=lock_table, ConsistentRead=True,
            Key={"tablePath": {"S": key}, "fileName": {"S": "00000000000000000001.json"}})["Item"]
        assert item["tempPath"] == {"S": f".tmp/{winners[0]}"}


# --- delta-rs on s3:// --------------------------------------------------------------------------------


def delta_rs_options() -> dict[str, str]:
    """Storage options for deltalake 1.6.6 on this server. Commits are conditional PUTs by default;
    `conditional_put=etag` says so explicitly (and `disabled` makes every commit fail)."""
    return {"AWS_ENDPOINT_URL": ENDPOINT, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION, "conditional_put": "etag"}


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


# --- Spark (S3A) <-> delta-rs -------------------------------------------------------------------------

# Runs in its own process: its own JVM with master local[1] and the S3A settings, whatever SparkSession
# the rest of the test session holds. Credentials come from the environment, never from arguments.
SPARK_SCRIPT = r"""
import glob, json, os, sys
from pyspark.sql import SparkSession

jar_dir, endpoint, region, bucket, prefix = sys.argv[1:6]
spark = (SparkSession.builder.master("local[1]").appName("tidemark-object-store-test")
         .config("spark.jars", ",".join(sorted(glob.glob(os.path.join(jar_dir, "*.jar")))))
         .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
         .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
         .config("spark.ui.enabled", "false")
         .config("spark.driver.memory", "768m")
         .config("spark.sql.shuffle.partitions", "1")
         .config("spark.databricks.delta.snapshotPartitions", "1")
         .config("spark.hadoop.fs.s3a.endpoint", endpoint)
         .config("spark.hadoop.fs.s3a.endpoint.region", region)
         .config("spark.hadoop.fs.s3a.path.style.access", "true")
         .config("spark.hadoop.fs.s3a.connection.ssl.enabled", "false")
         .config("spark.hadoop.fs.s3a.aws.credentials.provider",
                 "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider")
         .config("spark.hadoop.fs.s3a.attempts.maximum", "2")
         .config("spark.hadoop.fs.s3a.retry.limit", "2")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
out = {}
base = f"s3a://{bucket}/{prefix}"

# Spark writes two commits; delta-rs reads them afterwards.
spark.createDataFrame([(i, f"spark-{i}") for i in range(5)], "id long, v string") \
    .write.format("delta").save(f"{base}/spark")
spark.createDataFrame([(i, f"spark-{i}") for i in range(5, 8)], "id long, v string") \
    .write.format("delta").mode("append").save(f"{base}/spark")
out["spark_rows"] = sorted([r.id, r.v] for r in spark.read.format("delta").load(f"{base}/spark").collect())

# delta-rs wrote this one before Spark started.
out["delta_rs_table_seen_by_spark"] = sorted(
    [r.id, r.v] for r in spark.read.format("delta").load(f"{base}/delta_rs").collect())
jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
out["log_store"] = spark.conf.get("spark.delta.logStore.s3a.impl", "(default: S3SingleDriverLogStore)")

def describe(exc):  # the Java exception chain behind a py4j error: class and message of each cause
    parts, cause = [], getattr(exc, "java_exception", None)
    while cause is not None and len(parts) < 6:
        parts.append(str(cause.toString()).splitlines()[0][:300])
        cause = cause.getCause()
    return " <- ".join(parts) or str(exc).strip().splitlines()[0][:300]

def write(stream, data):
    stream.write(bytearray(data))
    stream.close()

# S3A conditional create (Hadoop 3.5.0): the put-if-absent a multi-writer log store can build on.
path = jvm.org.apache.hadoop.fs.Path(f"{base}/conditional/00000000000000000000.json")
fs = path.getFileSystem(conf)
def conditional_create(data):
    builder = fs.createFile(path).overwrite(False).must("fs.option.create.conditional.overwrite", True)
    write(builder.build(), data)
conditional_create(b"first")
try:
    conditional_create(b"second")
    out["conditional_second"] = "succeeded"
except Exception as exc:
    out["conditional_second"] = describe(exc)

# Plain create(overwrite=false), which S3SingleDriverLogStore uses after its in-JVM lock and existence
# check: another process that creates the key after the check is silently overwritten at close().
path = jvm.org.apache.hadoop.fs.Path(f"{base}/plain/00000000000000000000.json")
stream = fs.create(path, False)
print("READY-FOR-OTHER-WRITER", flush=True)
sys.stdin.readline()  # the test writes the same key from outside, then lets us close
try:
    write(stream, b"spark writer")
    out["plain_close"] = "succeeded"
except Exception as exc:
    out["plain_close"] = describe(exc)
spark.stop()
print("RESULT " + json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def spark_on_s3(object_store, tmp_path_factory):
    import pyarrow as pa
    from deltalake import write_deltalake

    prefix = f"tests/{uuid.uuid4().hex[:12]}"
    write_deltalake(f"s3://{BUCKET}/{prefix}/delta_rs",
                    pa.table({"id": pa.array([10, 11, 12], pa.int64()), "v": ["rs-10", "rs-11", "rs-12"]}),
                    storage_options=delta_rs_options())
    jar_dir = ROOT / ".cache" / "jars" / "spark"
    if not list(jar_dir.glob("hadoop-aws-*.jar")):
        pytest.fail(f"no hadoop-aws jar in {jar_dir}; run `make jars` (scripts/fetch_jars.sh)")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION,
           "PYSPARK_PYTHON": sys.executable}
    started = time.monotonic()
    log = tmp_path_factory.mktemp("spark_on_s3") / "stderr.log"
    with open(log, "w") as stderr:  # a file, not a pipe: a chatty JVM must not block on a full pipe
        proc = subprocess.Popen([sys.executable, "-c", SPARK_SCRIPT, str(jar_dir), ENDPOINT, REGION, BUCKET, prefix],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                env=env, cwd=ROOT)
    try:
        lines = []
        for line in proc.stdout:  # wait until the Spark side holds an open plain-create stream
            lines.append(line)
            if line.startswith("READY-FOR-OTHER-WRITER"):
                object_store["s3"].put_object(Bucket=BUCKET, Key=f"{prefix}/plain/00000000000000000000.json",
                                              Body=b"other writer")
                proc.stdin.write("go\n")
                proc.stdin.flush()
                break
        rest, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, _ = proc.communicate()
    lines.append(rest)
    result = [ln for ln in "".join(lines).splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not result:
        pytest.fail(f"the Spark S3A job failed (exit {proc.returncode}):\n{''.join(lines)[-3000:]}\n"
                    f"{log.read_text()[-5000:]}")
    return {"prefix": prefix, "seconds": time.monotonic() - started, **json.loads(result[0][len("RESULT "):])}


@pytest.mark.slow
def test_spark_writes_a_delta_table_on_s3a_that_delta_rs_reads_as_s3(spark_on_s3):
    from deltalake import DeltaTable

    expected = [[i, f"spark-{i}"] for i in range(8)]
    assert spark_on_s3["spark_rows"] == expected
    table = DeltaTable(f"s3://{BUCKET}/{spark_on_s3['prefix']}/spark", storage_options=delta_rs_options())
    assert table.version() == 1
    rows = table.to_pyarrow_table().to_pydict()
    assert sorted(map(list, zip(rows["id"], rows["v"], strict=True))) == expected


@pytest.mark.slow
def test_delta_rs_writes_a_delta_table_on_s3_that_spark_reads_as_s3a(spark_on_s3):
    assert spark_on_s3["delta_rs_table_seen_by_spark"] == [[10, "rs-10"], [11, "rs-11"], [12, "rs-12"]]


@pytest.mark.slow
def test_s3a_conditional_create_is_put_if_absent(object_store, spark_on_s3):
    failure = spark_on_s3["conditional_second"]
    assert failure != "succeeded"
    assert "412" in failure or "PreconditionFailed" in failure, failure
    body = object_store["s3"].get_object(
        Bucket=BUCKET, Key=f"{spark_on_s3['prefix']}/conditional/00000000000000000000.json")["Body"].read()
    assert body == b"first"


@pytest.mark.slow
def test_s3a_plain_create_is_not_put_if_absent(object_store, spark_on_s3):
    """Why Spark's stock S3 log store is single-driver only: its write path (lock and existence check in
    one JVM, then create(overwrite=false)) overwrites a commit another process made in between. If this
    starts failing, Hadoop made plain creates conditional: revisit docs/OBJECT_STORAGE_NOTES.md."""
    assert spark_on_s3["plain_close"] == "succeeded"
    body = object_store["s3"].get_object(
        Bucket=BUCKET, Key=f"{spark_on_s3['prefix']}/plain/00000000000000000000.json")["Body"].read()
    assert body == b"spark writer"
