"""The Spark jobs of the object-store tests, as Python sources each test module runs in a process of its own
(test_object_store_server_s3a.py, test_object_store_server_log_store.py)."""

from __future__ import annotations

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
# Each append's one task waits, after Delta took the snapshot it commits on, until delta-rs has committed again
# (the test's racer counts its commits in the file DELTA_RS_COMMITS): the version Spark tries first is then
# always taken, and the LogStore's refusal and Delta's retry happen in every append, not by chance.
from pyspark.sql import functions as F
@F.udf("long")
def after_a_delta_rs_commit(value, counter=os.environ["DELTA_RS_COMMITS"]):
    def count():
        try:
            with open(counter) as f:
                return int(f.read() or 0)
        except FileNotFoundError:
            return 0
    first, deadline = count(), time.monotonic() + 120
    while count() == first and time.monotonic() < deadline:
        time.sleep(0.02)
    return value
for k in range(1, int(os.environ["SPARK_APPENDS_IN_RACE"]) + 1):
    try:
        spark.createDataFrame([(1000 + k, f"spark-{k}")], "id long, v string") \
            .withColumn("id", after_a_delta_rs_commit("id")).write.format("delta").mode("append").save(mixed)
    except Exception as exc:
        m["errors"].append(describe(exc))
print("SPARK-APPENDS-DONE", flush=True)
sys.stdin.readline()
lap("mixed_race")
m["rows_seen_by_spark"] = rows(mixed, "id", "v")
spark.stop()
print("RESULT " + json.dumps(out), flush=True)
"""
