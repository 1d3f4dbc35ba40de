"""Pipeline options against the real broker, Spark and Delta: topic patterns (new topics picked up),
a date-time start position, and output partition columns."""

from __future__ import annotations

import pytest

from tests import helpers
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline
from tidemark.kafka.offsets import OffsetRange

pytestmark = pytest.mark.integration


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def test_a_topic_pattern_reads_every_matching_topic_and_picks_up_new_ones(kafka_bootstrap, spark, lake):
    prefix = helpers.unique("pat")
    first = helpers.create_topic(f"{prefix}.eu", partitions=2)
    helpers.create_topic(f"{prefix}.eu.audit", partitions=1)  # does not match the whole pattern
    helpers.produce(first, 6)
    helpers.produce(f"{prefix}.eu.audit", 5)
    config = parse_pipeline({"name": prefix, "topic_pattern": rf"{prefix}\.(eu|us)", "table": prefix}, "test")

    plan = prepare_batch(config, props())
    assert plan.ranges == [OffsetRange(first, 0, 0, 3), OffsetRange(first, 1, 0, 3)]
    execute_batch(spark, plan, props())

    second = helpers.create_topic(f"{prefix}.us", partitions=1)
    helpers.produce(second, 4)
    helpers.produce(first, 2)
    plan = prepare_batch(config, props())
    assert plan.ranges == [OffsetRange(first, 0, 3, 4), OffsetRange(first, 1, 3, 4), OffsetRange(second, 0, 0, 4)]
    execute_batch(spark, plan, props())
    rows = helpers.query(config.table_uri, "SELECT kafka_topic, COUNT(*) AS n, COUNT(DISTINCT kafka_offset) AS d "
                                           "FROM t GROUP BY kafka_topic ORDER BY kafka_topic")
    assert rows == [{"kafka_topic": first, "n": 8, "d": 4}, {"kafka_topic": second, "n": 4, "d": 4}]


def test_a_topic_pattern_that_matches_nothing_says_so_and_plans_nothing(kafka_bootstrap, lake, caplog):
    """A glob where a regular expression is meant ('orders-*' matches 'orders' and 'orders--' only) used to
    look like a quiet topic every run: the warning names the pattern and says it is a regular expression."""
    prefix = helpers.unique("glob")
    helpers.create_topic(f"{prefix}-eu", partitions=1)
    config = parse_pipeline({"name": prefix, "topic_pattern": f"{prefix}-*", "table": prefix}, "test")
    with caplog.at_level("WARNING", logger="tidemark"):
        assert prepare_batch(config, props()).is_empty
    assert f"topic_pattern /{prefix}-*/ matches none of the cluster's" in caplog.text
    assert "'orders-.*', not 'orders-*'" in caplog.text


def test_a_date_time_start_skips_older_records_of_new_partitions(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("since"), partitions=2)
    before = helpers.past_ms(60)
    helpers.produce(topic, 4, timestamp_ms=before)  # 2 per partition, a second before the start time
    since = helpers.at_ms(before + 1000)
    helpers.produce(topic, 6, start=100, timestamp_ms=before + 2000)  # 3 per partition, a second after it
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic,
                             "starting_offsets": since.isoformat()}, "test")
    plan = prepare_batch(config, props())
    assert plan.ranges == [OffsetRange(topic, 0, 2, 5), OffsetRange(topic, 1, 2, 5)]
    execute_batch(spark, plan, props())
    ids = helpers.query(config.table_uri, "SELECT kafka_offset FROM t ORDER BY kafka_partition, kafka_offset")
    assert [r["kafka_offset"] for r in ids] == [2, 3, 4, 2, 3, 4]

    future = parse_pipeline({"name": f"{topic}_future", "topics": [topic], "table": f"{topic}_future",
                             "starting_offsets": "2999-01-01T00:00:00Z"}, "test")
    assert prepare_batch(future, props()).is_empty  # nothing that new: start at the latest offset


def test_partition_by_kafka_date_partitions_the_output(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("bydate"), partitions=1)
    helpers.produce(topic, 5)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                             "value_schema": {"order_id": "bigint", "amount": "double"},
                             "partition_by": ["kafka_date"]}, "test")
    execute_batch(spark, prepare_batch(config, props()), props())

    from deltalake import DeltaTable

    table = DeltaTable(config.table_uri)
    assert table.metadata().partition_columns == ["kafka_date"]
    rows = helpers.query(config.table_uri, "SELECT COUNT(*) AS n, SUM(order_id) AS s, "
                                           "COUNT(CASE WHEN kafka_date = CAST(kafka_timestamp AS DATE) THEN 1 END) "
                                           "AS dated FROM t")
    assert rows == [{"n": 5, "s": 10, "dated": 5}]


@pytest.mark.parametrize("value_format", ["raw", "json"])
def test_a_long_range_split_over_several_tasks_is_still_read_exactly_once(kafka_bootstrap, spark, lake, value_format):
    """max_offsets_per_spark_task: partition 0's long range is read by several Spark tasks (raw: the one
    write pass; json: the typed path with dead letters), and every offset lands once."""
    from tidemark.batch.spark import batch_io
    from tidemark.ledger.store import Ledger
    from tidemark.settings import ledger_uri

    topic = helpers.create_topic(helpers.unique(f"split_{value_format}"), partitions=2)
    helpers.produce_values(topic, [b'{"order_id": %d}' % i for i in range(40)] + [b"not json"] * 3, partition=0)
    helpers.produce_values(topic, [b'{"order_id": %d}' % i for i in range(100, 103)], partition=1)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "max_offsets_per_spark_task": 8,
                             **({"value_format": "json", "value_schema": {"order_id": "bigint"}}
                                if value_format == "json" else {})}, "test")
    plan = prepare_batch(config, props())
    options = batch_io.kafka_source_options(plan, props())
    assert int(options["minPartitions"]) == 6 + 1  # 43 offsets in pieces of 8, and the short range
    assert batch_io.read_ranges(spark, options).rdd.getNumPartitions() > 2

    execute_batch(spark, plan, props())
    per_partition = "SELECT kafka_partition AS p, COUNT(*) AS n, COUNT(DISTINCT kafka_offset) AS d FROM t GROUP BY 1"
    good = {r["p"]: (r["n"], r["d"]) for r in helpers.query(config.table_uri, per_partition)}
    if value_format == "raw":
        assert good == {0: (43, 43), 1: (3, 3)}
    else:
        assert good == {0: (40, 40), 1: (3, 3)}
        dead = helpers.query(config.dead_letter_uri, "SELECT kafka_partition AS p, kafka_offset AS o FROM t ORDER BY o")
        assert [(r["p"], r["o"]) for r in dead] == [(0, 40), (0, 41), (0, 42)]
    assert Ledger(ledger_uri()).state(topic).positions == {OffsetRange(topic, 0, 0, 0).tp: 43,
                                                           OffsetRange(topic, 1, 0, 0).tp: 3}
