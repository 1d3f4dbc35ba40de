"""Table maintenance and ingestion never corrupt each other (issue 27 item 1), on output tables written by the
real batch path (Kafka, Spark, Delta) and maintained by delta-rs (tidemark.maintenance):

- an OPTIMIZE that commits while a batch's Delta transaction is open (the batch's Spark tasks held at a gate
  until the OPTIMIZE is in), and one planned before a batch committed and committing after it: Delta's
  conflict rules let both commit, and every record is in the output once;
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
from tidemark import maintenance, settings, spark_io
from tidemark.audit import audit_tables
from tidemark.batch import execute
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config import parse_pipeline
from tidemark.ledger import Ledger

pytestmark = pytest.mark.integration


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def pipeline(prefix: str, **extra):
    topic = helpers.create_topic(helpers.unique(prefix), partitions=2)
    return topic, parse_pipeline({"name": topic, "topics": [topic], "table": topic, **extra}, "test")


def ingest(spark, config, records: int, start: int) -> None:
    helpers.produce(config.topics[0], records, start=start)
    execute_batch(spark, prepare_batch(config, props()), props(), "read_committed")


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

    @F.udf("boolean")
    def held(_):
        import os
        import time

        while not os.path.exists(str(gate)):  # the gate: the batch's tasks wait for the OPTIMIZE to commit
            time.sleep(0.05)
        return True

    read = spark_io.read_ranges
    with monkeypatch.context() as patched:
        patched.setattr(spark_io, "read_ranges", lambda session, options: read(session, options).where(
            held(F.col("offset"))))
        patched.setattr(spark.sparkContext, "pythonExec", sys.executable)  # the UDF's workers: this interpreter
        helpers.produce(topic, 6, start=6)
        plan = prepare_batch(config, props())
        failures: list[BaseException] = []

        def run() -> None:
            try:
                execute_batch(spark, plan, props(), "read_committed")
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                failures.append(exc)

        writer = threading.Thread(target=run)
        writer.start()
        tracker = spark.sparkContext.statusTracker()
        helpers.wait_until(lambda: tracker.getActiveStageIds(), 120, "the batch's Spark job to start")
        optimized = maintenance.optimize(config.table_uri, None, topic, ["kafka_partition", "kafka_offset"])
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
        execute_batch(spark, pending, props(), "read_committed")
    ledger = Ledger(settings.ledger_uri())
    assert ledger.state(topic).pending_batch_id == pending.batch_id == 2

    report = maintenance.maintain(config, settings.ledger_uri(), None)
    assert report["output"]["optimize"]["files_after"] == 1 and report["output"]["vacuumed_files"] == 0  # 7 days
    deleted = maintenance.vacuum(config.table_uri, None, topic, dt.timedelta(0), floor=dt.timedelta(0))
    assert len(deleted) == report["output"]["optimize"]["files_before"]  # every replaced file is gone
    assert len(list(Path(config.table_uri).glob("*.parquet"))) == 1
    assert report["output"]["checkpoint_version"] is not None and report["ledger"]["checkpoint_version"] is not None

    nothing_new = prepare_batch(config, props())  # recovery: the batch is in the output, so it is rolled forward
    assert nothing_new.is_empty
    assert {(r.status, r.record_count) for r in ledger.rows(topic) if r.batch_id == 2} == {("committed", 3)}
    version = DeltaTable(config.table_uri).version()
    execute_batch(spark, pending, props(), "read_committed")  # a retry of the batch: recognised, nothing written
    assert DeltaTable(config.table_uri).version() == version
    # Spark's own write of the batch is skipped too: Delta reads the marker from the checkpoint delta-rs wrote
    spark_io.write_output(spark.read.format("delta").load(config.table_uri).limit(1), pending)
    assert DeltaTable(config.table_uri).version() == version
    assert {(r.status, r.record_count) for r in ledger.rows(topic) if r.batch_id == 2} == {("committed", 3)}
    assert_exactly_once(config, 12)

    ingest(spark, config, 6, 12)
    assert ledger.state(topic).last_batch_id == 3
    assert_exactly_once(config, 18)
