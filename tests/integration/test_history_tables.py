"""History tables (``keyed.history: scd2``, issue 59 part 3) against the real broker, Spark and Delta, hand-picked:
versions with their intervals across batches, a late change put into its place, a late delete closing the version
it falls in, a tombstone refused as a dead letter, Debezium's change events, a replay and a retry of a committed
batch changing nothing, and the audit (one current row per live key). The generated combinations against a model
of the versions are in test_history_generated.py."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from tests import helpers
from tests.integration.test_keyed_tables import debezium, ledger_changes, props, run
from tidemark import settings
from tidemark.audit.live_table import audit_tables
from tidemark.batch import execute as execute_module
from tidemark.batch.backfill import BackfillRequest, prepare_backfill
from tidemark.batch.execute import execute_batch
from tidemark.batch.modes.history import History
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.reset import ResetRequest, reset_offsets
from tidemark.batch.spark import versions as versions_module
from tidemark.config.pipeline import parse_pipeline
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

T = "2024-05-01T10:00:{:02d}Z".format


def at(second: int) -> dt.datetime:
    return dt.datetime(2024, 5, 1, 10, 0, second)


def history_pipeline(topic: str, fields: dict | None = None, **keyed):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                           "value_schema": {"id": "bigint", "name": "string?", "updated_at": "timestamp",
                                            "op": "string?", **(fields or {})},
                           "keyed": {"keys": ["id"], "order_by": ["updated_at"], "delete_field": "op",
                                     "delete_values": ["delete"], "history": "scd2", **keyed}}, "test")


def change(key: int, name: str | None, second: int, op: str | None = None) -> tuple[bytes, bytes]:
    return str(key).encode(), json.dumps({"id": key, "name": name, "updated_at": T(second), "op": op}).encode()


def versions(uri: str) -> list[tuple]:
    """(id, name, valid_from, valid_to, is_current) of every version, in key and time order (times naive UTC)."""
    rows = helpers.query(uri, "SELECT id, name, valid_from, valid_to, is_current FROM t ORDER BY id, valid_from")
    return [(r["id"], r["name"], _naive(r["valid_from"]), _naive(r["valid_to"]), r["is_current"]) for r in rows]


def _naive(value):
    return value.replace(tzinfo=None) if isinstance(value, dt.datetime) else value


def test_versions_late_changes_deletes_and_replays(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("history"), partitions=1)
    config = history_pipeline(topic)
    helpers.produce_pairs(topic, [change(1, "a", 10), change(1, "b", 20), change(2, "x", 10)], 0)
    run(spark, config)
    assert versions(config.table_uri) == [(1, "a", at(10), at(20), False), (1, "b", at(20), None, True),
                                          (2, "x", at(10), None, True)]
    assert ledger_changes(topic) == {1: (3, 0, 0)}

    # A late change of key 1 (older than "b") splits "a"'s interval; key 2 is deleted at 30; key 3 is deleted before
    # it has a version, then a late upsert older than that delete arrives: a closed version.
    # The batch is killed twice before it lands (below), and applied once.
    helpers.produce_pairs(topic, [change(1, "late", 15), change(2, None, 30, "delete"), change(3, None, 40, "delete"),
                                  change(3, "z", 35)], 0)
    crash_twice_then_recover(spark, config)
    assert versions(config.table_uri) == [
        (1, "a", at(10), at(15), False), (1, "late", at(15), at(20), False), (1, "b", at(20), None, True),
        (2, "x", at(10), at(30), False), (3, "z", at(35), at(40), False)]
    assert ledger_changes(topic)[2] == (2, 2, 0)  # inserted "late" and "z"; "a" and "x" closed

    # A late delete of key 1 falls in "late"'s interval and closes it; a tombstone has no ordering: a dead letter.
    # The file adds a field: the batch adds its column (null in the versions before it).
    config = history_pipeline(topic, {"tier": "string?"})
    helpers.produce_pairs(topic, [change(1, None, 17, "delete"), (b"2", None), change(2, "x2", 50)], 0)
    run(spark, config)
    assert helpers.query(config.table_uri, "SELECT COUNT(*) AS n FROM t WHERE tier IS NULL") == [{"n": 6}]
    assert versions(config.table_uri) == [
        (1, "a", at(10), at(15), False), (1, "late", at(15), at(17), False), (1, "b", at(20), None, True),
        (2, "x", at(10), at(30), False), (2, "x2", at(50), None, True), (3, "z", at(35), at(40), False)]
    dead = helpers.query(config.dead_letter_uri, "SELECT kafka_offset, error FROM t")
    assert [r["kafka_offset"] for r in dead] == [8] and "carries no ordering" in dead[0]["error"]

    # A replay of everything committed (reset to earliest, then a run) and a backfill of batch 2's offsets
    # change nothing: every change is below the high water.
    before = helpers.query(config.table_uri, "SELECT * FROM t ORDER BY id, valid_from")
    reset_offsets(config, props(), ResetRequest("to-earliest", execute=True, reason="replay test", owner="test"))
    run(spark, config)
    backfill = prepare_backfill(config, props(), BackfillRequest(offsets={TopicPartition(topic, 0): (3, 7)}),
                                owner="test")
    execute_batch(spark, backfill, props())
    assert helpers.query(config.table_uri, "SELECT * FROM t ORDER BY id, valid_from") == before
    assert [v for k, v in ledger_changes(topic).items() if k > 3] == [(0, 0, 0), (0, 0, 0)]

    # The audit (delta-rs): one current version per key, no Kafka coordinate twice, nothing outside the committed
    # ranges. Its Spark sample (current versions against Kafka) runs in test_history_generated.py.
    report = audit_tables(topic, config.table_uri, config.dead_letter_uri, settings.ledger_uri(), keys=["id"],
                          history=True)
    assert report.ok and report.records == 6, report.to_dict()
    twice = spark.read.format("delta").load(config.table_uri).where("id = 1 AND is_current")
    twice.withColumn("valid_from", twice["valid_to"]).write.format("delta").mode("append").save(config.table_uri)
    damaged = audit_tables(topic, config.table_uri, config.dead_letter_uri, settings.ledger_uri(), keys=["id"],
                           history=True)  # damage: key 1 with two current versions
    assert not damaged.ok and damaged.duplicate_keys == [{"id": 1, "rows": 2}]


def crash_twice_then_recover(spark, config) -> None:
    """The batch's deletes are kept before its MERGE (the commit point), and finalize reads its counts from the
    MERGE's commit: killed between the two, then between the MERGE and the ledger commit, the retries of the frozen
    batch merge it once (the table's version moves by one)."""
    import unittest.mock

    def killed(*args, **kwargs):
        raise RuntimeError("killed")

    def attempt() -> None:
        execute_batch(spark, prepare_batch(config, props(), owner="crash-test"), props())

    version = helpers.table_version(config.table_uri)
    with unittest.mock.patch.object(History, "commit", killed), pytest.raises(RuntimeError, match="killed"):
        attempt()  # after the deletes were kept, before the MERGE
    kept = spark.read.format("delta").load(versions_module.deletes_uri(config.table_uri))
    assert kept.count() == 2 and helpers.table_version(config.table_uri) == version
    with unittest.mock.patch.object(execute_module, "finalize_batch", killed), pytest.raises(RuntimeError):
        attempt()  # the retry: after the MERGE, before the ledger commit
    assert helpers.table_version(config.table_uri) == version + 1
    attempt()  # the recovery: the marker makes the MERGE a no-op; finalize reads the counts from its commit
    assert helpers.table_version(config.table_uri) == version + 1
    assert Ledger(settings.ledger_uri()).state(config.name).pending_batch_id is None


def test_debezium_change_events_keep_their_versions(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("history-dbz"), partitions=1)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                             "value_schema": {"id": "bigint", "name": "string?"},
                             "keyed": {"keys": ["id"], "envelope": "debezium", "history": "scd2"}}, "test")
    key = b'{"id": 1}'
    # Key 2's second change has a source.ts_ms older than its first's (a clock step): its time is the first's.
    went_back = json.dumps({"op": "u", "before": {"id": 2, "name": "x"}, "after": {"id": 2, "name": "y"},
                            "source": {"lsn": 50, "ts_ms": 1714558800000 + 35}}).encode()
    helpers.produce_pairs(topic, [(key, debezium("r", None, {"id": 1, "name": "a"}, 10)),
                                  (key, debezium("u", {"id": 1, "name": "a"}, {"id": 1, "name": "b"}, 20)),
                                  (key, debezium("d", {"id": 1, "name": "b"}, None, 30)), (key, None),
                                  (b'{"id": 2}', debezium("c", None, {"id": 2, "name": "x"}, 40)),
                                  (b'{"id": 2}', went_back)], 0)
    run(spark, config)
    ts = dt.datetime(2024, 5, 1, 10, 20)  # source.ts_ms = 1714558800000 + lsn
    two = helpers.query(config.table_uri, "SELECT name, valid_from, valid_to, is_current FROM t WHERE id = 2 "
                                          "ORDER BY cdc_position")
    at_40 = ts + dt.timedelta(milliseconds=40)
    assert [(r["name"], _naive(r["valid_from"]), _naive(r["valid_to"]), r["is_current"]) for r in two] == [
        ("x", at_40, at_40, False), ("y", at_40, None, True)]
    rows = helpers.query(config.table_uri, "SELECT name, cdc_position, valid_from, valid_to, is_current FROM t "
                                           "WHERE id = 1 ORDER BY cdc_position")
    assert [(r["name"], r["cdc_position"], _naive(r["valid_from"]), _naive(r["valid_to"]), r["is_current"])
            for r in rows] == [("a", 10, ts + dt.timedelta(milliseconds=10), ts + dt.timedelta(milliseconds=20), False),
                               ("b", 20, ts + dt.timedelta(milliseconds=20), ts + dt.timedelta(milliseconds=30), False)]
    # The connector redelivers the update after a restart: the same version, no new one.
    helpers.produce_pairs(topic, [(key, debezium("u", {"id": 1, "name": "a"}, {"id": 1, "name": "b"}, 20))], 0)
    plan = prepare_batch(config, props())
    execute_batch(spark, plan, props())
    assert len(helpers.query(config.table_uri, "SELECT * FROM t")) == 4
    assert ledger_changes(topic)[2] == (0, 1, 0)  # its coordinates moved to the redelivered record

