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
from tidemark.config import parse_pipeline
from tidemark.errors import ConfigError
from tidemark.ledger import Ledger
from tidemark.offsets import TopicPartition as TP

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

    plan = prepare_backfill(config, props(), request, run_id="backfill-1")
    assert [(r.partition, r.start, r.end) for r in plan.ranges] == [(0, 5, 8), (1, 5, 8)]
    execute_batch(spark, plan, props(), "read_committed")
    assert count(config.table_uri) == {"n": 6, "u": 6}
    rows = Ledger(settings.ledger_uri()).rows(topic)
    assert {(r.kind, r.status, r.record_count) for r in rows} == {("backfill", "committed", 3)}
    assert Ledger(settings.ledger_uri()).state(topic).positions == {}  # the position did not move

    version = helpers.table_version(config.table_uri)
    again = prepare_backfill(config, props(), request, run_id="backfill-2")
    execute_batch(spark, again, props(), "read_committed")
    assert count(config.table_uri) == {"n": 6, "u": 6}
    # nothing new: no output commit at all, and the backfill's ledger rows are committed with 0 records
    assert helpers.table_version(config.table_uri) == version
    second = [r for r in Ledger(settings.ledger_uri()).rows(topic) if r.batch_id == again.batch_id]
    assert {(r.kind, r.status, r.record_count) for r in second} == {("backfill", "committed", 0)}

    # The scheduled run then reads everything once: the backfilled records are not duplicated.
    execute_batch(spark, prepare_batch(config, props()), props(), "read_committed")
    assert count(config.table_uri) == {"n": 20, "u": 20}


def test_explicit_offsets_are_validated_against_kafka(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("explicit"), partitions=2)
    helpers.produce(topic, 10)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic}, "test")
    plan = prepare_backfill(config, props(), BackfillRequest(offsets={TP(topic, 1): (1, 4)}))
    execute_batch(spark, plan, props(), "read_committed")
    assert helpers.query(config.table_uri, "SELECT kafka_partition AS p, kafka_offset AS o FROM t ORDER BY o") == [
        {"p": 1, "o": o} for o in (1, 2, 3)]
    with pytest.raises(ConfigError, match=r"\[3, 9\) is outside the offsets Kafka has \[0, 5\)"):
        prepare_backfill(config, props(), BackfillRequest(offsets={TP(topic, 0): (3, 9)}))
    with pytest.raises(ConfigError, match="is not a partition of this pipeline's topics"):
        prepare_backfill(config, props(), BackfillRequest(offsets={TP(topic, 5): (0, 1)}))
    with pytest.raises(ConfigError, match="must be after its start"):
        now = dt.datetime.now(dt.UTC)
        prepare_backfill(config, props(), BackfillRequest(window=(now, now)))
