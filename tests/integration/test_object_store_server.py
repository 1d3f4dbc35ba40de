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
- Tidemark's LogStore (jvm/logstore, io.tidemark.delta.S3ConditionalPutLogStore) gives Spark put-if-absent
  commits with that conditional create: a second commit of a version is refused with
  FileAlreadyExistsException and the first stays; Delta retries the loser, so two concurrent Spark appends,
  and Spark racing delta-rs on one table, keep every commit.

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

# Each Spark job runs in its own process: its own JVM with master local[1] and the S3A settings, whatever
# SparkSession the rest of the test session holds. Credentials come from the environment, never from
# arguments. SPARK_SESSION is the common start of both scripts; argv[6], when given, is a JSON object of
# extra Spark settings.
SPARK_SESSION = r"""
import glob, json, os, sys, time
from pyspark.sql import SparkSession

started = time.monotonic()

jar_dir, endpoint, region, bucket, prefix = sys.argv[1:6]
extra_conf = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
builder = (SparkSession.builder.master("local[1]").appName("tidemark-object-store-test")
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
         .config("spark.hadoop.fs.s3a.retry.limit", "2"))
for key, value in extra_conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
out = {}
base = f"s3a://{bucket}/{prefix}"

def describe(exc):  # the Java exception chain behind a py4j error: class and message of each cause
    parts, cause = [], getattr(exc, "java_exception", None)
    while cause is not None and len(parts) < 6:
        parts.append(str(cause.toString()).splitlines()[0][:300])
        cause = cause.getCause()
    return " <- ".join(parts) or str(exc).strip().splitlines()[0][:300]
"""

SPARK_SCRIPT = SPARK_SESSION + r"""

# Spark writes two commits; delta-rs reads them afterwards.
spark.createDataFrame([(i, f"spark-{i}") for i in range(5)], "id long, v string") \
    .write.format("delta").save(f"{base}/spark")
spark.createDataFrame([(i, f"spark-{i}") for i in range(5, 8)], "id long, v string") \
    .write.format("delta").mode("append").save(f"{base}/spark")
out["spark_rows"] = sorted([r.id, r.v] for r in spark.read.format("delta").load(f"{base}/spark").collect())

# delta-rs wrote this one before Spark started.
out["delta_rs_table_seen_by_spark"] = sorted(
    [r.id, r.v] for r in spark.read.format("delta").load(f"{base}/delta_rs").collect())
out["log_store"] = spark.conf.get("spark.delta.logStore.s3a.impl", "(default: S3SingleDriverLogStore)")

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


# --- Tidemark's LogStore: put-if-absent Delta commits from Spark (jvm/logstore) ---------------------------
#
# io.tidemark.delta.S3ConditionalPutLogStore writes `_delta_log/N.json` with S3A's conditional create
# (`If-None-Match: *`, the mechanism delta-rs commits with) and turns the 412 into
# java.nio.file.FileAlreadyExistsException. One Spark process (below) runs every Spark-side step; the
# tests read its JSON result and check the objects on the server themselves.

LOG_STORE = "io.tidemark.delta.S3ConditionalPutLogStore"
LOG_STORE_JAR = "tidemark-delta-logstore.jar"
TAKEN = "java.nio.file.FileAlreadyExistsException"
SPARK_APPENDS_IN_RACE = 3  # Spark's appends to the table delta-rs appends to at the same time

SPARK_LOGSTORE_SCRIPT = SPARK_SESSION + r"""
import threading, time
import boto3
from pyspark.java_gateway import ensure_callback_server_started

out["timings"] = {}
clock = [started]
def lap(name):
    now = time.monotonic()
    out["timings"][name] = round(now - clock[0], 1)
    clock[0] = now
lap("session")
Path = jvm.org.apache.hadoop.fs.Path

def java_class(exc):
    java = getattr(exc, "java_exception", None)
    return str(java.getClass().getName()) if java is not None else f"python:{type(exc).__name__}: {exc}"

def delta_store(table):  # the io.delta.storage.LogStore that Delta uses for this table
    store = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table).store()
    if str(store.getClass().getName()).endswith("DelegatingLogStore"):  # picks one store per scheme
        store = store.getDelegate(Path(f"{table}/_delta_log"))
    if str(store.getClass().getName()).endswith("LogStoreAdaptor"):  # wraps an io.delta.storage.LogStore
        store = store.logStoreImpl()
    return str(store.getClass().getName())

def rows(table, *cols):
    return sorted(list(r) for r in spark.read.format("delta").load(table).select(*cols).collect())

# (a) Spark creates and appends to a Delta table through the LogStore on s3a://, then sets a checkpoint
# interval of 2: commit 2 writes a checkpoint and `_last_checkpoint` (Delta's one overwrite=true write).
# The s3:// spelling (S3A registered for it) gets a table of its own.
table = f"{base}/spark"
try:
    spark.createDataFrame([(i, f"spark-{i}") for i in range(5)], "id long, v string").write.format("delta").save(table)
    spark.createDataFrame([(i, f"spark-{i}") for i in range(5, 8)], "id long, v string") \
        .write.format("delta").mode("append").save(table)
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    out["a"] = {"rows": rows(table, "id", "v"), "log_store": delta_store(table)}
except Exception as exc:
    out["a"] = {"error": describe(exc)}
table = f"s3://{bucket}/{prefix}/spark_s3"
try:
    spark.createDataFrame([(i, f"spark-{i}") for i in range(8)], "id long, v string").write.format("delta").save(table)
    out["a_s3"] = {"rows": rows(table, "id", "v"), "log_store": delta_store(table)}
except Exception as exc:
    out["a_s3"] = {"error": describe(exc)}
lap("a_tables")

# (b) The LogStore API itself, called through py4j.
ours = jvm.io.tidemark.delta.S3ConditionalPutLogStore(conf)
stock = jvm.io.delta.storage.S3SingleDriverLogStore(conf)

def lines(*items):
    listing = jvm.java.util.ArrayList()
    for item in items:
        listing.add(item)
    return listing.iterator()

def write(store, path, actions, overwrite=False):
    try:
        store.write(Path(path), actions, overwrite, conf)
        return "written"
    except Exception as exc:
        return java_class(exc)

def drain(iterator):
    items = []
    while iterator.hasNext():
        items.append(iterator.next())
    return items

def read(path):
    iterator = ours.read(Path(path), conf)
    try:
        return drain(iterator)
    finally:
        iterator.close()

b = out["b"] = {}
log = f"{base}/logstore/_delta_log"
first = f"{log}/00000000000000000000.json"
b["first"] = write(ours, first, lines("first writer"))
b["second"] = write(ours, first, lines("second writer"))
b["same_bytes_again"] = write(ours, first, lines("first writer"))
b["after"] = read(first)
b["external"] = write(ours, f"{base}/external/_delta_log/00000000000000000000.json", lines("spark writer"))
b["overwrite"] = [write(ours, f"{log}/_last_checkpoint", lines(v), overwrite=True) for v in ("v1", "v2")]
b["overwritten"] = read(f"{log}/_last_checkpoint")
for version in (1, 2):
    write(ours, f"{log}/{version:020d}.json", lines(f"commit {version}"))
b["list_from_1"] = [str(s.getPath().getName()) for s in drain(ours.listFrom(Path(f"{log}/{1:020d}.json"), conf))]
try:
    missing = Path(f"{base}/none/_delta_log/{0:020d}.json")
    b["list_missing"] = [str(s.getPath()) for s in drain(ours.listFrom(missing, conf))]
except Exception as exc:
    b["list_missing"] = java_class(exc)
b["partial_write_visible"] = bool(ours.isPartialWriteVisible(Path(first), conf))
b["resolved"] = str(ours.resolvePathOnPhysicalStorage(Path(first), conf).toString())
try:  # a put-if-absent write on a file system without a conditional create is refused, not done unsafely
    local = "file:///tmp/tidemark-logstore-" + prefix.replace("/", "-") + "/0.json"
    ours.write(Path(local), lines("x"), False, conf)
    b["on_local_fs"] = "written"
except Exception as exc:
    b["on_local_fs"] = describe(exc)

# Another process commits the same file while the writer is in the middle of writing it: the actions
# iterator below makes that conditional PUT (boto3, as delta-rs would) when the writer has consumed the
# last line. Delta's stock S3SingleDriverLogStore has checked existence and opened its stream by then.
ensure_callback_server_started(spark.sparkContext._gateway)
s3 = boto3.client("s3", endpoint_url=endpoint, region_name=region)

class ActionsWithARacingWriter:
    def __init__(self, key, items):
        self.key, self.items, self.position, self.raced = key, items, 0, None
    def hasNext(self):
        if self.position < len(self.items):
            return True
        if self.raced is None:
            try:
                s3.put_object(Bucket=bucket, Key=self.key, Body=b"other writer\n", IfNoneMatch="*")
                self.raced = "other writer committed"
            except Exception as exc:
                self.raced = f"other writer failed: {exc}"
        return False
    def next(self):
        self.position += 1
        return self.items[self.position - 1]
    class Java:
        implements = ["java.util.Iterator"]

for name, store in (("stock", stock), ("ours", ours)):
    key = f"{prefix}/injected-{name}/_delta_log/{1:020d}.json"
    actions = ActionsWithARacingWriter(key, ["spark writer"])
    b[f"injected_{name}"] = {"result": write(store, f"s3a://{bucket}/{key}", actions), "other": actions.raced}

# Racing threads in this JVM, each with its own body, released together on one new file.
b["races"] = []
for trial in range(5):
    path, results, gate = f"{base}/race/_delta_log/{trial:020d}.json", [None] * 8, threading.Barrier(8)
    def racer(i, path=path, results=results, gate=gate):
        gate.wait()
        results[i] = write(ours, path, lines(f"writer {i}"))
    threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    b["races"].append({"results": results, "stored": read(path)})

# How failures are told apart (a 409 cannot be produced by the local server).
S3Exception = jvm.software.amazon.awssdk.services.s3.model.S3Exception
def s3_error(status, code):
    details = jvm.software.amazon.awssdk.awscore.exception.AwsErrorDetails.builder().errorCode(code).build()
    return S3Exception.builder().statusCode(status).awsErrorDetails(details).message(code).build()
s3a = jvm.org.apache.hadoop.fs.s3a
taken = s3a.RemoteFileChangedException("k", "Writing Object", "precondition", s3_error(412, "PreconditionFailed"))
classify = jvm.io.tidemark.delta.S3ConditionalPutLogStore.classify
b["classify"] = {name: str(classify(exc).toString()) for name, exc in {
    "412": taken,
    "412_wrapped": jvm.java.io.IOException("wrapped", taken),
    "409": s3a.AWSBadRequestException("conflict", s3_error(409, "ConditionalRequestConflict")),
    "400": s3a.AWSBadRequestException("bad", s3_error(400, "InvalidRequest")),
    "other": jvm.java.io.IOException("connection reset"),
}.items()}
lap("b_logstore_api")

# (c) Two appends from two threads of this session, released together, in rounds until one round shows
# a commit that lost its version and was retried (its version > readVersion + 1).
concurrent = f"{base}/concurrent"
spark.createDataFrame([(0, 0)], "round int, writer int").write.format("delta").save(concurrent)
c = out["c"] = {"errors": [], "rounds": 0}
for round_ in range(1, 5):
    gate, frames = threading.Barrier(2), [spark.createDataFrame([(round_, i)], "round int, writer int") for i in (1, 2)]
    def append(frame):
        gate.wait()
        try:
            frame.write.format("delta").mode("append").save(concurrent)
        except Exception as exc:
            c["errors"].append(describe(exc))
    threads = [threading.Thread(target=append, args=(frame,)) for frame in frames]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    c["rounds"] = round_
    history = spark.sql(f"DESCRIBE HISTORY delta.`{concurrent}`").select("version", "readVersion").collect()
    if c["errors"] or any(h.readVersion is not None and h.version > h.readVersion + 1 for h in history):
        break
c["rows"] = rows(concurrent, "round", "writer")
lap("c_threads")

# Spark and delta-rs (the test process) append to one table at the same time.
mixed = f"{base}/mixed"
spark.createDataFrame([(0, "spark-0")], "id long, v string").write.format("delta").save(mixed)
m = out["mixed"] = {"errors": []}
print("READY-FOR-DELTA-RS", flush=True)
sys.stdin.readline()
lap("mixed_setup")
for k in range(1, int(os.environ["SPARK_APPENDS_IN_RACE"]) + 1):
    try:
        spark.createDataFrame([(1000 + k, f"spark-{k}")], "id long, v string") \
            .write.format("delta").mode("append").save(mixed)
    except Exception as exc:
        m["errors"].append(describe(exc))
print("SPARK-APPENDS-DONE", flush=True)
sys.stdin.readline()
lap("mixed_race")
m["rows_seen_by_spark"] = rows(mixed, "id", "v")
spark.stop()
print("RESULT " + json.dumps(out), flush=True)
"""


def _delta_rs_appends(uri: str, stop: threading.Event, written: list, errors: list) -> None:
    """Append one row per commit until told to stop (the default retries on a lost version)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    j = 0
    while not stop.is_set():
        j += 1
        try:
            write_deltalake(uri, pa.table({"id": pa.array([2000 + j], pa.int64()), "v": [f"rs-{j}"]}), mode="append",
                            storage_options=delta_rs_options())
            written.append(2000 + j)
        except Exception as exc:  # reported by the test
            errors.append(repr(exc))
            return
        stop.wait(0.15)


@pytest.fixture(scope="module")
def spark_log_store(object_store, tmp_path_factory):
    jar_dir = ROOT / ".cache" / "jars" / "spark"
    if not (jar_dir / LOG_STORE_JAR).is_file():
        pytest.fail(f"no {LOG_STORE_JAR} in {jar_dir}; run `make jars` (scripts/fetch_jars.sh builds jvm/logstore)")
    prefix = f"tests/{uuid.uuid4().hex[:12]}"
    s3 = object_store["s3"]
    # A commit another process made before Spark starts; Spark's LogStore must refuse to replace it.
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/external/_delta_log/{0:020d}.json", Body=b"external writer\n",
                  IfNoneMatch="*")
    extra = {"spark.delta.logStore.s3a.impl": LOG_STORE, "spark.delta.logStore.s3.impl": LOG_STORE,
             "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION,
           "PYSPARK_PYTHON": sys.executable, "SPARK_APPENDS_IN_RACE": str(SPARK_APPENDS_IN_RACE)}
    mixed_uri = f"s3://{BUCKET}/{prefix}/mixed"
    stop, written, rs_errors = threading.Event(), [], []
    racer = threading.Thread(target=_delta_rs_appends, args=(mixed_uri, stop, written, rs_errors), daemon=True)
    started, lines = time.monotonic(), []
    log = tmp_path_factory.mktemp("spark_log_store") / "stderr.log"
    with open(log, "w") as stderr:  # a file, not a pipe: a chatty JVM must not block on a full pipe
        proc = subprocess.Popen([sys.executable, "-c", SPARK_LOGSTORE_SCRIPT, str(jar_dir), ENDPOINT, REGION, BUCKET,
                                 prefix, json.dumps(extra)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                env=env, cwd=ROOT)
    def send(text: str) -> None:
        try:
            proc.stdin.write(text)
            proc.stdin.flush()
        except BrokenPipeError:  # the job died; its exit code and stderr are reported below
            pass

    watchdog = threading.Timer(900, proc.kill)  # a hung JVM must not hang the test run
    watchdog.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("READY-FOR-DELTA-RS"):  # Spark created the table: race it
                racer.start()
                send("go\n")
            elif line.startswith("SPARK-APPENDS-DONE"):
                stop.set()
                racer.join(timeout=120)
                send("done\n")
            elif line.startswith("RESULT "):
                break
        rest, _ = proc.communicate(timeout=120)
        lines.append(rest)
    finally:
        watchdog.cancel()
        stop.set()
        if proc.poll() is None:
            proc.kill()
    result = [ln for ln in "".join(lines).splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not result:
        pytest.fail(f"the Spark LogStore job failed (exit {proc.returncode}):\n{''.join(lines)[-3000:]}\n"
                    f"{log.read_text()[-6000:]}")
    out = json.loads(result[0][len("RESULT "):])
    out["seconds"] = round(time.monotonic() - started, 1)
    print(f"\nSpark LogStore job: {out['seconds']} s; steps: {out['timings']}")
    return {"prefix": prefix, "mixed_uri": mixed_uri, "delta_rs_written": written, "delta_rs_errors": rs_errors,
            **out}


def _body(s3, key: str) -> bytes:
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def _commits(s3, table_prefix: str) -> dict[int, dict]:
    """version -> commitInfo of every `_delta_log/N.json` of a table, read straight from the server."""
    import re

    commits = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{table_prefix}/_delta_log/"):
        for item in page.get("Contents", []):
            name = item["Key"].rsplit("/", 1)[1]
            if re.fullmatch(r"\d{20}\.json", name):
                actions = [json.loads(ln) for ln in _body(s3, item["Key"]).decode().splitlines() if ln.strip()]
                commits[int(name[:20])] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    return commits


def _retried(info: dict, version: int) -> bool:
    """A commit that was written at a later version than the one its transaction first tried: Spark records
    the version it read (`readVersion`), delta-rs its retries (`operationMetrics.num_retries`)."""
    if info.get("readVersion") is not None:
        return version > info["readVersion"] + 1
    return int(info.get("operationMetrics", {}).get("num_retries", 0)) > 0


def _by_spark(info: dict) -> bool:
    return info.get("engineInfo", "").startswith("Apache-Spark")


@pytest.mark.slow
def test_log_store_spark_writes_delta_on_s3a_that_delta_rs_reads_as_s3(object_store, spark_log_store):
    from deltalake import DeltaTable

    expected = [[i, f"spark-{i}"] for i in range(8)]
    assert spark_log_store["a"].get("log_store") == LOG_STORE, spark_log_store["a"]  # Delta really used it
    assert spark_log_store["a"]["rows"] == expected
    log = f"{spark_log_store['prefix']}/spark/_delta_log"
    assert json.loads(_body(object_store["s3"], f"{log}/_last_checkpoint"))["version"] == 2
    object_store["s3"].head_object(Bucket=BUCKET, Key=f"{log}/{2:020d}.checkpoint.parquet")
    table = DeltaTable(f"s3://{BUCKET}/{spark_log_store['prefix']}/spark", storage_options=delta_rs_options())
    assert table.version() == 2
    rows = table.to_pyarrow_table().to_pydict()
    assert sorted(map(list, zip(rows["id"], rows["v"], strict=True))) == expected


@pytest.mark.slow
def test_log_store_serves_the_s3_spelling_with_s3a_as_fs_s3_impl(spark_log_store):
    from deltalake import DeltaTable

    expected = [[i, f"spark-{i}"] for i in range(8)]
    assert spark_log_store["a_s3"].get("log_store") == LOG_STORE, spark_log_store["a_s3"]
    assert spark_log_store["a_s3"]["rows"] == expected
    table = DeltaTable(f"s3://{BUCKET}/{spark_log_store['prefix']}/spark_s3", storage_options=delta_rs_options())
    rows = table.to_pyarrow_table().to_pydict()
    assert sorted(map(list, zip(rows["id"], rows["v"], strict=True))) == expected


@pytest.mark.slow
def test_log_store_refuses_a_second_commit_of_a_version_and_keeps_the_first(object_store, spark_log_store):
    b, key = spark_log_store["b"], f"{spark_log_store['prefix']}/logstore/_delta_log/{0:020d}.json"
    assert b["first"] == "written"
    assert b["second"] == TAKEN
    # The same bytes again: the retry of a commit whose response was lost finds its own object; success.
    assert b["same_bytes_again"] == "written"
    assert b["after"] == ["first writer"]
    assert _body(object_store["s3"], key) == b"first writer\n"


@pytest.mark.slow
def test_log_store_refuses_a_commit_another_process_made_first(object_store, spark_log_store):
    assert spark_log_store["b"]["external"] == TAKEN
    key = f"{spark_log_store['prefix']}/external/_delta_log/{0:020d}.json"
    assert _body(object_store["s3"], key) == b"external writer\n"


@pytest.mark.slow
def test_log_store_keeps_a_commit_made_during_its_write_where_the_stock_store_overwrites_it(
        object_store, spark_log_store):
    """Another process commits N.json after the writer started (the iterator of its actions triggers it):
    Delta's stock S3SingleDriverLogStore reports success and replaces that commit; ours refuses."""
    b, s3, prefix = spark_log_store["b"], object_store["s3"], spark_log_store["prefix"]
    for name in ("stock", "ours"):
        assert b[f"injected_{name}"]["other"] == "other writer committed", b
    assert b["injected_stock"]["result"] == "written"
    assert _body(s3, f"{prefix}/injected-stock/_delta_log/{1:020d}.json") == b"spark writer\n"  # a commit lost
    assert b["injected_ours"]["result"] == TAKEN
    assert _body(s3, f"{prefix}/injected-ours/_delta_log/{1:020d}.json") == b"other writer\n"


@pytest.mark.slow
def test_log_store_racing_writers_have_exactly_one_winner(spark_log_store):
    for trial in spark_log_store["b"]["races"]:
        winners = [i for i, r in enumerate(trial["results"]) if r == "written"]
        assert len(winners) == 1, trial
        assert all(r == TAKEN for r in trial["results"] if r != "written"), trial
        assert trial["stored"] == [f"writer {winners[0]}"]


@pytest.mark.slow
def test_log_store_reads_lists_overwrites_and_refuses_unsafe_file_systems(spark_log_store):
    b, prefix = spark_log_store["b"], spark_log_store["prefix"]
    assert b["overwrite"] == ["written", "written"] and b["overwritten"] == ["v2"]
    assert b["list_from_1"] == [f"{1:020d}.json", f"{2:020d}.json", "_last_checkpoint"]  # sorted by name
    assert b["list_missing"] == "java.io.FileNotFoundException"
    assert b["partial_write_visible"] is False
    assert b["resolved"] == f"s3a://{BUCKET}/{prefix}/logstore/_delta_log/{0:020d}.json"
    assert b["on_local_fs"].startswith("java.io.IOException: S3ConditionalPutLogStore cannot write file:"), b
    assert "has no conditional create" in b["on_local_fs"]


@pytest.mark.slow
def test_log_store_tells_a_taken_version_from_an_in_flight_conflict(spark_log_store):
    assert spark_log_store["b"]["classify"] == {"412": "KEY_EXISTS", "412_wrapped": "KEY_EXISTS",
                                               "409": "IN_FLIGHT_CONFLICT", "400": "OTHER", "other": "OTHER"}


@pytest.mark.slow
def test_concurrent_spark_appends_both_commit(object_store, spark_log_store):
    """Two appends from two threads, released together, read the same version and write the same N.json:
    the loser gets FileAlreadyExistsException from the LogStore, Delta checks the winner for conflicts
    and commits at N+1. Both appends are in the table, once each."""
    c, prefix = spark_log_store["c"], spark_log_store["prefix"]
    assert c["errors"] == []
    rounds = c["rounds"]
    assert c["rows"] == [[0, 0]] + [[r, w] for r in range(1, rounds + 1) for w in (1, 2)]
    commits = _commits(object_store["s3"], f"{prefix}/concurrent")
    assert sorted(commits) == list(range(1 + 2 * rounds))
    assert any(_retried(info, v) for v, info in commits.items()), f"no round raced in {rounds} rounds: {commits}"


@pytest.mark.slow
def test_spark_and_delta_rs_racing_on_one_table_never_lose_a_commit(object_store, spark_log_store):
    from deltalake import DeltaTable

    mixed, prefix = spark_log_store["mixed"], spark_log_store["prefix"]
    rs_written = spark_log_store["delta_rs_written"]
    assert spark_log_store["delta_rs_errors"] == [] and mixed["errors"] == []
    assert rs_written, "delta-rs made no commit during Spark's appends"
    expected = sorted([[0, "spark-0"]] + [[1000 + k, f"spark-{k}"] for k in range(1, SPARK_APPENDS_IN_RACE + 1)]
                      + [[i, f"rs-{i - 2000}"] for i in rs_written])
    table = DeltaTable(spark_log_store["mixed_uri"], storage_options=delta_rs_options())
    rows = table.to_pyarrow_table().to_pydict()
    assert sorted(map(list, zip(rows["id"], rows["v"], strict=True))) == expected  # each append exactly once
    assert mixed["rows_seen_by_spark"] == expected
    commits = _commits(object_store["s3"], f"{prefix}/mixed")
    assert sorted(commits) == list(range(len(expected)))  # one commit per append, no gap, none overwritten
    assert sum(map(_by_spark, commits.values())) == 1 + SPARK_APPENDS_IN_RACE
    spark_retried = sorted(v for v, info in commits.items() if _by_spark(info) and _retried(info, v))
    rs_retried = sorted(v for v, info in commits.items() if not _by_spark(info) and _retried(info, v))
    print(f"\n{len(rs_written)} delta-rs and {SPARK_APPENDS_IN_RACE} Spark appends; commits that lost their first "
          f"version and were retried: Spark {spark_retried}, delta-rs {rs_retried}")
    assert spark_retried, "Spark never lost a version to delta-rs: the race did not happen"
