"""Tidemark's LogStore (jvm/logstore, io.tidemark.delta.S3ConditionalPutLogStore) on the local S3-compatible
server gives Spark put-if-absent commits with S3A's conditional create: a second commit of a version is
refused with FileAlreadyExistsException and the first stays; Delta retries the loser, so two concurrent
Spark appends, and Spark racing delta-rs on one table, keep every commit.

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

from tests.integration.object_store import ACCESS_KEY, BUCKET, ENDPOINT, REGION, ROOT, SECRET_KEY, delta_rs_options
from tests.integration.object_store_jobs import SPARK_LOGSTORE_SCRIPT

pytestmark = pytest.mark.integration


# --- Tidemark's LogStore: put-if-absent Delta commits from Spark (jvm/logstore) ---------------------------
#
# io.tidemark.delta.S3ConditionalPutLogStore writes `_delta_log/N.json` with S3A's conditional create
# (`If-None-Match: *`, the mechanism delta-rs commits with) and turns the 412 into
# java.nio.file.FileAlreadyExistsException. One Spark process (object_store_jobs.SPARK_LOGSTORE_SCRIPT) runs
# every Spark-side step; the tests read its JSON result and check the objects on the server themselves.

LOG_STORE = "io.tidemark.delta.S3ConditionalPutLogStore"
LOG_STORE_JAR = "tidemark-delta-logstore.jar"
TAKEN = "java.nio.file.FileAlreadyExistsException"
SPARK_APPENDS_IN_RACE = 2  # Spark's appends to the table delta-rs appends to at the same time, each made to lose


def _delta_rs_appends(uri: str, stop: threading.Event, written: list, errors: list, counter: Path) -> None:
    """Append one row per commit until told to stop (the default retries on a lost version); after each commit,
    ``counter`` holds how many it made (the Spark job's appends wait for the next)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    j = 0
    while not stop.is_set():
        j += 1
        try:
            write_deltalake(uri, pa.table({"id": pa.array([2000 + j], pa.int64()), "v": [f"rs-{j}"]}), mode="append",
                            storage_options=delta_rs_options())
            written.append(2000 + j)
            counter.with_suffix(".tmp").write_text(str(len(written)))
            counter.with_suffix(".tmp").replace(counter)
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
    work = tmp_path_factory.mktemp("spark_log_store")
    counter = work / "delta_rs_commits"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION,
           "PYSPARK_PYTHON": sys.executable, "SPARK_APPENDS_IN_RACE": str(SPARK_APPENDS_IN_RACE),
           "DELTA_RS_COMMITS": str(counter)}
    mixed_uri = f"s3://{BUCKET}/{prefix}/mixed"
    stop, written, rs_errors = threading.Event(), [], []
    racer = threading.Thread(target=_delta_rs_appends, args=(mixed_uri, stop, written, rs_errors, counter),
                             daemon=True)
    started, lines = time.monotonic(), []
    log = work / "stderr.log"
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
    # each Spark append waited in its write for a delta-rs commit: its first version was always taken
    assert len(spark_retried) == SPARK_APPENDS_IN_RACE, "a Spark append did not lose its version to delta-rs"
