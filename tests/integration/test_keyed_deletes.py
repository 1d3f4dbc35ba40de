"""A delete sticks (issue 57), against the real broker, Spark and Delta: a tombstone in a later batch than its
key's row deletes it under ``order_by`` whatever the row's ordering; a delete that carries an ordering (a
``delete_field`` delete, Debezium's ``d``) is not undone by an older change of the key that reaches Kafka in a
later batch (a late producer, a connector's redelivery), through the delete markers kept beside the table, which
the maintenance DAG expires; and the audit names a key present although its newest change is a delete. The
generated combinations are in test_keyed_generated.py."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from deltalake import DeltaTable

from tests import helpers
from tests.integration.test_keyed_audit import audit
from tests.integration.test_keyed_tables import debezium, ledger_changes, props, run
from tidemark.audit.live_table import verdict
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.spark import delete_markers
from tidemark.batch.status import batch_summary
from tidemark.config.pipeline import parse_pipeline
from tidemark_cli.table_views import summary_line

pytestmark = pytest.mark.integration

T = "2024-05-01T10:00:{:02d}Z".format


def ordered_pipeline(topic: str, **extra):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                           "value_schema": {"id": "bigint", "name": "string?", "updated_at": "timestamp",
                                            "op": "string?"},
                           "keyed": {"keys": ["id"], "order_by": ["updated_at"], **extra}}, "test")


def upsert(key: int, name: str, second: int, op: str | None = None) -> tuple[bytes, bytes]:
    return str(key).encode(), json.dumps({"id": key, "name": name, "updated_at": T(second), "op": op}).encode()


def ids(uri: str) -> dict[int, str]:
    return {r["id"]: r["name"] for r in helpers.query(uri, "SELECT id, name FROM t")}


def test_a_tombstone_in_a_later_batch_deletes_under_order_by(kafka_bootstrap, spark, lake):
    """The issue's reproduction: two tombstones (a text key, a JSON key) in the batch after the rows."""
    topic = helpers.create_topic(helpers.unique("keyed-tomb"), partitions=1)
    config = ordered_pipeline(topic)
    helpers.produce_pairs(topic, [upsert(1, "a", 1), upsert(2, "b", 2), upsert(3, "c", 3)], 0)
    run(spark, config)
    assert ids(config.table_uri) == {1: "a", 2: "b", 3: "c"}
    helpers.produce_pairs(topic, [(b"1", None), (b'{"id": 2}', None)], 0)
    plan = prepare_batch(config, props())
    execute_batch(spark, plan, props())
    assert ids(config.table_uri) == {3: "c"}
    assert ledger_changes(topic) == {1: (3, 0, 0), 2: (0, 0, 2)}
    # `tidemark run`'s last line says it (issue 61, 4)
    assert summary_line(batch_summary(plan)) == (
        f"pipeline '{topic}': batch 2 committed: 2 changes merged (rows: 0 inserted, 0 updated, 2 deleted), 0 "
        f"filtered, 0 dead letters -> {config.table_uri} (Delta version 1)")
    # A change after a tombstone re-inserts the key, whatever its ordering against the deleted row's.
    helpers.produce_pairs(topic, [upsert(3, "c-old", 0), (b"3", None), upsert(3, "c-again", 0)], 0)
    run(spark, config)
    assert ids(config.table_uri) == {3: "c-again"} and ledger_changes(topic)[3] == (0, 1, 0)

    # The audit names a deleted key present, with or without --verify-sample: damage by hand, as the append audit's
    # damage tests make it (key 1's row of version 0 written back, though its newest change is a tombstone).
    kept = spark.read.format("delta").option("versionAsOf", 0).load(config.table_uri).where("id = 1")
    kept.write.format("delta").mode("append").save(config.table_uri)
    assert ids(config.table_uri) == {1: "a", 3: "c-again"}
    report, _ = audit(spark, config, 0)  # `tidemark audit PIPELINE`, its Spark job in this process
    assert not report.ok and report.sample is None and report.deleted_keys_present == 1, report.to_dict()
    assert report.deleted_keys == [{"key": {"id": 1}, "topic": topic, "partition": 0, "offset": 3}]
    assert "1 keys held although their newest change is a delete" in verdict(report)


def test_an_ordered_delete_is_not_undone_by_an_older_change_arriving_later(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("keyed-late"), partitions=1)
    config = ordered_pipeline(topic, delete_field="op", delete_values=["delete"])
    helpers.produce_pairs(topic, [upsert(1, "a", 10), upsert(2, "b", 10)], 0)
    run(spark, config)
    helpers.produce_pairs(topic, [upsert(1, "gone", 20, op="delete")], 0)
    run(spark, config)
    assert ids(config.table_uri) == {2: "b"}
    # A late producer: older than the delete, in a later batch; and a newer change of key 2 as a control.
    helpers.produce_pairs(topic, [upsert(1, "late", 15), upsert(2, "b2", 30)], 0)
    run(spark, config)
    assert ids(config.table_uri) == {2: "b2"}
    assert ledger_changes(topic) == {1: (2, 0, 0), 2: (0, 0, 1), 3: (0, 1, 0)}
    markers = delete_markers.markers_uri(config.table_uri)
    assert [(r["id"], r["batch_id"]) for r in helpers.query(markers, "SELECT id, batch_id FROM t")] == [(1, 2)]
    # Readers see a plain table: the markers are a table of their own inside the output's folder.
    assert sorted(DeltaTable(config.table_uri).to_pyarrow_table().column("id").to_pylist()) == [2]
    # A change newer than the delete brings the key back.
    helpers.produce_pairs(topic, [upsert(1, "back", 25)], 0)
    run(spark, config)
    assert ids(config.table_uri) == {1: "back", 2: "b2"}
    # The maintenance DAG expires markers older than the retention: then an older change is applied again.
    assert delete_markers.expire(config.table_uri, dt.timedelta(days=7)) == 0
    assert delete_markers.expire(config.table_uri, dt.timedelta(0),
                                now=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)) == 1
    assert helpers.query(markers, "SELECT id FROM t") == []


def test_a_redelivered_older_debezium_update_does_not_bring_a_deleted_row_back(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("keyed-redeliver"), partitions=1)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                             "value_schema": {"id": "bigint", "name": "string?"},
                             "keyed": {"keys": ["id"], "envelope": "debezium"}}, "test")
    key = b'{"id": 1}'
    created, updated = debezium("c", None, {"id": 1, "name": "a"}, 10), debezium("u", {"id": 1, "name": "a"},
                                                                                 {"id": 1, "name": "b"}, 20)
    helpers.produce_pairs(topic, [(key, created), (key, updated)], 0)
    run(spark, config)
    helpers.produce_pairs(topic, [(key, debezium("d", {"id": 1, "name": "b"}, None, 30)), (key, None)], 0)
    run(spark, config)
    assert ids(config.table_uri) == {}
    # The connector restarts and redelivers from an older position: the c and the u again, at new offsets.
    helpers.produce_pairs(topic, [(key, created), (key, updated)], 0)
    run(spark, config)
    assert ids(config.table_uri) == {} and ledger_changes(topic) == {1: (1, 0, 0), 2: (0, 0, 1), 3: (0, 0, 0)}
