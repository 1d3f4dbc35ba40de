"""Backfills through the commit protocol: a time window or explicit offsets, deduplicated on the
Kafka coordinates, never moving the committed position."""

from __future__ import annotations

import datetime as dt

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.backfill import BackfillRequest, prepare_backfill
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import ConfigError
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def count(table: str) -> dict:
    return helpers.query(table, "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, kafka_offset)) AS u FROM t")[0]


def test_time_window_backfill_twice_adds_nothing_the_second_time(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("window"), partitions=2)
    before = helpers.past_ms(60)
    helpers.produce(topic, 10, timestamp_ms=before)  # before the window
    start = helpers.at_ms(before + 1000)
    helpers.produce(topic, 6, start=10, timestamp_ms=before + 1500)  # inside the window
    end = helpers.at_ms(before + 2000)
    helpers.produce(topic, 4, start=16, timestamp_ms=before + 2500)  # after the window
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic}, "test")
    request = BackfillRequest(window=(start, end))

    plan = prepare_backfill(config, props(), request, owner="backfill-1")
    assert [(r.partition, r.start, r.end) for r in plan.ranges] == [(0, 5, 8), (1, 5, 8)]
    execute_batch(spark, plan, props())
    assert count(config.table_uri) == {"n": 6, "u": 6}
    rows = Ledger(settings.ledger_uri()).rows(topic)
    assert {(r.kind, r.status, r.record_count) for r in rows} == {("backfill", "committed", 3)}
    assert Ledger(settings.ledger_uri()).state(topic).positions == {}  # the position did not move

    version = helpers.table_version(config.table_uri)
    again = prepare_backfill(config, props(), request, owner="backfill-2")
    execute_batch(spark, again, props())
    assert count(config.table_uri) == {"n": 6, "u": 6}
    # nothing new: no output commit at all, and the backfill's ledger rows are committed with 0 records
    assert helpers.table_version(config.table_uri) == version
    second = [r for r in Ledger(settings.ledger_uri()).rows(topic) if r.batch_id == again.batch_id]
    assert {(r.kind, r.status, r.record_count) for r in second} == {("backfill", "committed", 0)}

    # The scheduled run then reads everything once: the backfilled records are not duplicated.
    execute_batch(spark, prepare_batch(config, props()), props())
    assert count(config.table_uri) == {"n": 20, "u": 20}


def test_explicit_offsets_are_validated_against_kafka(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("explicit"), partitions=2)
    helpers.produce(topic, 10)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic}, "test")
    plan = prepare_backfill(config, props(), BackfillRequest(offsets={TP(topic, 1): (1, 4)}))
    execute_batch(spark, plan, props())
    assert helpers.query(config.table_uri, "SELECT kafka_partition AS p, kafka_offset AS o FROM t ORDER BY o") == [
        {"p": 1, "o": o} for o in (1, 2, 3)]
    with pytest.raises(ConfigError, match=r"\[3, 9\) is outside the offsets Kafka has \[0, 5\)"):
        prepare_backfill(config, props(), BackfillRequest(offsets={TP(topic, 0): (3, 9)}))
    with pytest.raises(ConfigError, match=r"form field 'offsets': .* is not a partition of this pipeline's topics \("):
        prepare_backfill(config, props(), BackfillRequest(offsets={TP(topic, 5): (0, 1)}))
    with pytest.raises(ConfigError, match="must be after its start"):
        now = dt.datetime.now(dt.UTC)
        prepare_backfill(config, props(), BackfillRequest(window=(now, now)))


# A backfill goes through the same steps as a scheduled batch (batch.prepare): its rows record the topic's id,
# its recovery checks it, and a batch whose output committed before the ledger did is rolled forward.

def test_a_backfill_frozen_before_its_topic_was_recreated_is_not_executed(kafka_bootstrap, lake):
    from tests.integration.test_faults import recreate, topic_id
    from tidemark.errors import TopicRecreatedError

    topic = helpers.create_topic(helpers.unique("backfill_recreated"), partitions=1)
    helpers.produce(topic, 3)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic}, "test")
    request = BackfillRequest(offsets={TP(topic, 0): (0, 3)})
    frozen = prepare_backfill(config, props(), request, owner="backfill-1")
    ledger = Ledger(settings.ledger_uri())
    assert {(r.kind, r.status, r.topic_id) for r in ledger.rows(topic)} == {("backfill", "planned", topic_id(topic))}
    recreate(topic, partitions=1)
    helpers.produce(topic, 3)  # the same offsets exist again: only the topic id tells them apart
    before = ledger.version()
    with pytest.raises(TopicRecreatedError, match=rf"Batch {frozen.batch_id} was frozen against the old topic"):
        prepare_backfill(config, props(), request, owner="backfill-1")  # the same run, retried
    assert ledger.version() == before and helpers.query_or_none(config.table_uri) is None


def test_a_backfill_whose_output_committed_before_its_ledger_is_rolled_forward(kafka_bootstrap, spark, lake,
                                                                             monkeypatch):
    from tidemark.batch import execute

    topic = helpers.create_topic(helpers.unique("backfill_pending"), partitions=2)
    helpers.produce(topic, 8)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic}, "test")
    request = BackfillRequest(offsets={TP(topic, 0): (0, 4), TP(topic, 1): (0, 4)})
    plan = prepare_backfill(config, props(), request, owner="backfill-1")

    def crash(*args, **kwargs):  # the driver dies between the output commit and the ledger commit
        raise SystemExit("killed after the output commit")

    with monkeypatch.context() as patched, pytest.raises(SystemExit):
        patched.setattr(execute, "finalize_batch", crash)
        execute_batch(spark, plan, props())
    ledger = Ledger(settings.ledger_uri())
    assert ledger.state(topic).pending_batch_id == plan.batch_id
    assert count(config.table_uri) == {"n": 8, "u": 8}  # the commit point was reached

    again = prepare_backfill(config, props(), request, owner="backfill-1")  # the retry rolls the batch forward
    assert {(r.batch_id, r.status, r.record_count) for r in ledger.rows(topic) if r.batch_id == plan.batch_id} == {
        (plan.batch_id, "committed", 4)}
    execute_batch(spark, again, props())  # the window again: nothing new is written
    assert count(config.table_uri) == {"n": 8, "u": 8}
    assert ledger.state(topic).positions == {}  # backfills never move the committed position


def test_a_backfill_is_refused_before_anything_is_frozen_when_its_table_could_be_committed_twice(lake):
    single = {"spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore"}
    config = parse_pipeline({"name": "unsafe", "topics": ["unsafe"], "table": "s3a://lake/unsafe",
                             "spark_conf": single}, "test")
    request = BackfillRequest(offsets={TP("unsafe", 0): (0, 1)})
    with pytest.raises(ConfigError, match="S3SingleDriverLogStore.*could then commit the same batch twice"):
        prepare_backfill(config, {"bootstrap.servers": "127.0.0.1:1"}, request)
    assert Ledger(settings.ledger_uri()).version() == -1
