"""Table maintenance and ingestion never corrupt each other (issue 27 item 1), on output tables written by the
real batch path (Kafka, Spark, Delta) and maintained by delta-rs (tidemark.operations.table_maintenance):

- an OPTIMIZE that commits while a batch's Delta transaction is open (the batch's Spark tasks held at a gate
  until the OPTIMIZE is in), and one planned before a batch committed and committing after it: Delta's
  conflict rules let both commit, and every record is in the output once;
- the same beside a keyed table's MERGE batches (issue 39): a MERGE that loses to the OPTIMIZE runs again on the
  new version, an OPTIMIZE that loses to MERGEs runs again, and every key is in the table once, as the reference;
- after OPTIMIZE (Z-ordered), VACUUM (the replaced files really deleted) and checkpoints, a batch whose output
  committed before its ledger is rolled forward exactly once, a retried batch is still recognised as
  committed (its marker is read from delta-rs' checkpoint by Spark), and the next batch goes on."""

from __future__ import annotations

import datetime as dt
import json
import sys
import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests import helpers
from tidemark import settings
from tidemark.audit.live_table import audit_tables
from tidemark.batch import execute
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.spark import batch_io
from tidemark.config.pipeline import parse_pipeline
from tidemark.ledger.store import Ledger
from tidemark.operations import table_maintenance

pytestmark = pytest.mark.integration


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def pipeline(prefix: str, **extra):
    topic = helpers.create_topic(helpers.unique(prefix), partitions=2)
    return topic, parse_pipeline({"name": topic, "topics": [topic], "table": topic, **extra}, "test")


def ingest(spark, config, records: int, start: int) -> None:
    helpers.produce(config.topics[0], records, start=start)
    execute_batch(spark, prepare_batch(config, props()), props())


def assert_exactly_once(config, records: int) -> None:
    report = audit_tables(config.name, config.table_uri, config.dead_letter_uri, settings.ledger_uri(), None)
    assert report.ok and report.records == records, report
    assert DeltaTable(config.table_uri).count() == records


def commits(uri: str) -> dict[int, dict]:
    return {c["version"]: c for c in DeltaTable(uri).history()}


def test_optimize_committing_while_a_batch_commits_leaves_every_record_once(kafka_bootstrap, spark, lake, tmp_path,
                                                                            monkeypatch):
    topic, config = pipeline("maint_race")
    ingest(spark, config, 6, 0)  # two files, one per partition
    gate = tmp_path / "gate"

    from pyspark.sql import functions as F

    held = helpers.gate_udf(gate)  # the batch's tasks wait for the OPTIMIZE to commit

    read = batch_io.read_ranges
    with monkeypatch.context() as patched:
        patched.setattr(batch_io, "read_ranges", lambda session, options: read(session, options).where(
            held(F.col("offset"))))
        patched.setattr(spark.sparkContext, "pythonExec", sys.executable)  # the UDF's workers: this interpreter
        helpers.produce(topic, 6, start=6)
        plan = prepare_batch(config, props())
        failures: list[BaseException] = []

        def run() -> None:
            try:
                execute_batch(spark, plan, props())
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                failures.append(exc)

        writer = threading.Thread(target=run)
        writer.start()
        tracker = spark.sparkContext.statusTracker()
        helpers.wait_until(lambda: tracker.getActiveStageIds(), 120, "the batch's Spark job to start")
        optimized = table_maintenance.optimize(config.table_uri, None, topic, ["kafka_partition", "kafka_offset"])
        gate.touch()
        writer.join(300)
        assert not writer.is_alive() and failures == []
    assert optimized["files_before"] > optimized["files_after"] == 1
    history = commits(config.table_uri)
    write = next(c for c in history.values() if c["operation"] == "WRITE"
                 and json.loads(c.get("userMetadata") or "{}").get("tidemark", {}).get("batch_id") == plan.batch_id)
    zorder = max(v for v, c in history.items() if c["operation"] == "OPTIMIZE")
    assert write["readVersion"] < zorder < write["version"], "the OPTIMIZE committed inside the batch's transaction"
    assert_exactly_once(config, 12)

    stale = DeltaTable(config.table_uri)  # an OPTIMIZE planned now, committing after the next batch
    ingest(spark, config, 6, 12)
    compacted = stale.optimize.compact()
    assert compacted["numFilesRemoved"] >= 2
    last = commits(config.table_uri)[DeltaTable(config.table_uri).version()]
    assert last["operation"] == "OPTIMIZE" and last["readVersion"] < last["version"] - 1
    assert_exactly_once(config, 18)
    assert Ledger(settings.ledger_uri()).state(topic).last_batch_id == 3


def test_marker_and_recovery_still_work_after_optimize_vacuum_and_checkpoints(kafka_bootstrap, spark, lake,
                                                                              monkeypatch):
    topic, config = pipeline("maint_recover", maintenance={"optimize_every": "24h", "vacuum_retain": "168h",
                                                           "zorder_by": ["kafka_offset"]})
    ingest(spark, config, 6, 0)
    helpers.produce(topic, 6, start=6)
    pending = prepare_batch(config, props())

    def killed(*args, **kwargs):  # the driver dies between the output commit and the ledger commit
        raise SystemExit("killed after the output commit")

    with monkeypatch.context() as patched, pytest.raises(SystemExit):
        patched.setattr(execute, "finalize_batch", killed)
        execute_batch(spark, pending, props())
    ledger = Ledger(settings.ledger_uri())
    assert ledger.state(topic).pending_batch_id == pending.batch_id == 2

    report = table_maintenance.maintain(config, settings.ledger_uri(), None)
    assert report["output"]["optimize"]["files_after"] == 1 and report["output"]["vacuumed_files"] == 0  # 7 days
    deleted = table_maintenance.vacuum(config.table_uri, None, topic, dt.timedelta(0), floor=dt.timedelta(0))
    assert len(deleted) == report["output"]["optimize"]["files_before"]  # every replaced file is gone
    assert len(list(Path(config.table_uri).glob("*.parquet"))) == 1
    assert report["output"]["checkpoint_version"] is not None and report["ledger"]["checkpoint_version"] is not None

    nothing_new = prepare_batch(config, props())  # recovery: the batch is in the output, so it is rolled forward
    assert nothing_new.is_empty
    assert {(r.status, r.record_count) for r in ledger.rows(topic) if r.batch_id == 2} == {("committed", 3)}
    version = DeltaTable(config.table_uri).version()
    execute_batch(spark, pending, props())  # a retry of the batch: recognised, nothing written
    assert DeltaTable(config.table_uri).version() == version
    # Spark's own write of the batch is skipped too: Delta reads the marker from the checkpoint delta-rs wrote
    batch_io.write_output(spark.read.format("delta").load(config.table_uri).limit(1), pending)
    assert DeltaTable(config.table_uri).version() == version
    assert {(r.status, r.record_count) for r in ledger.rows(topic) if r.batch_id == 2} == {("committed", 3)}
    assert_exactly_once(config, 12)

    ingest(spark, config, 6, 12)
    assert ledger.state(topic).last_batch_id == 3
    assert_exactly_once(config, 18)


def test_optimize_beside_keyed_merge_batches_keeps_every_key_once(kafka_bootstrap, spark, lake, tmp_path, monkeypatch,
                                                                 caplog):
    """Issue 39 item 7: a Z-ORDER by the keys that commits while a MERGE batch's transaction is open (its
    source held at a gate until the OPTIMIZE is in), and a compaction planned before a MERGE batch and
    committing after it; the table equals the reference built from the changes, and the audit is clean."""
    from tests.integration.test_keyed_tables import Reference, change, keyed_pipeline, produce, table
    from tidemark.batch.spark import merge

    topic = helpers.create_topic(helpers.unique("maint_keyed"), partitions=2)
    config, ref = keyed_pipeline(topic), Reference()
    produce(topic, ref, [change(k, f"n{k}", k) for k in range(8)], partition=0)
    produce(topic, ref, [change(k, f"n{k}", k) for k in range(10, 18)], partition=1)
    execute_batch(spark, prepare_batch(config, props()), props())  # the first batch creates the table: 2 files
    gate, waiting = tmp_path / "gate", tmp_path / "waiting"

    from pyspark.sql import functions as F

    held = helpers.gate_udf(gate, waiting=waiting)  # the MERGE's source waits for the OPTIMIZE to commit

    original = merge.merge
    with monkeypatch.context() as patched:
        patched.setattr(merge, "merge", lambda session, newest, *a, **k: original(
            session, newest.where(held(F.col("kafka_offset"))), *a, **k))
        patched.setattr(spark.sparkContext, "pythonExec", sys.executable)
        produce(topic, ref, [change(1, "u1", 100), change(2, "TOMBSTONE"), change(20, "new", 1)], partition=0)
        produce(topic, ref, [change(11, "u11", 110), change(12, "x", op="delete")], partition=1)
        plan = prepare_batch(config, props())
        failures: list[BaseException] = []

        def run() -> None:
            try:
                execute_batch(spark, plan, props())
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                failures.append(exc)

        writer = threading.Thread(target=run)
        writer.start()
        helpers.wait_until(waiting.exists, 120, "the MERGE's Spark job to start")
        optimized = table_maintenance.optimize(config.table_uri, None, topic, ["id"])
        gate.touch()
        writer.join(300)
        assert not writer.is_alive() and failures == [], failures
    assert optimized["numFilesAdded"] >= 1 and optimized["files_after"] == 1
    assert "lost to a concurrent commit" in caplog.text, "the MERGE must have met the OPTIMIZE's commit"
    assert table(config.table_uri) == ref.rows
    history = commits(config.table_uri)
    merged = [v for v, c in history.items() if c["operation"] == "MERGE"]
    zorder = max(v for v, c in history.items() if c["operation"] == "OPTIMIZE")
    assert len(merged) == 1 and zorder < merged[0], "one MERGE, committed on the OPTIMIZE's version"
    assert json.loads(history[merged[0]]["userMetadata"])["tidemark"]["batch_id"] == plan.batch_id

    # A compaction planned before the next MERGE batch and committed after it: the MERGE rewrote the file the
    # compaction planned to replace, so delta-rs refuses its commit and maintenance runs it again on the new
    # version.
    stale, opened = DeltaTable(config.table_uri), []
    produce(topic, ref, [change(3, "u3", 300), change(21, "new2", 2), change(4, "TOMBSTONE")], partition=0)
    execute_batch(spark, prepare_batch(config, props()), props())
    produce(topic, ref, [change(13, "u13", 130)], partition=1)
    execute_batch(spark, prepare_batch(config, props()), props())
    open_table = table_maintenance.storage.open_table
    with monkeypatch.context() as patched:
        patched.setattr(table_maintenance.storage, "open_table", lambda uri, store: (
            stale if not opened.append(uri) and len(opened) == 1 else open_table(uri, store)))
        compacted = table_maintenance.optimize(config.table_uri, None, topic, ["id"])
    assert compacted["attempts"] == 2, "the stale OPTIMIZE lost to the MERGE batches and ran again"
    last = commits(config.table_uri)[DeltaTable(config.table_uri).version()]
    assert last["operation"] == "OPTIMIZE" and last["readVersion"] == last["version"] - 1
    assert table(config.table_uri) == ref.rows
    report = audit_tables(topic, config.table_uri, config.dead_letter_uri, settings.ledger_uri(), keys=["id"])
    assert report.ok and report.records == len(ref.rows), report.to_dict()
