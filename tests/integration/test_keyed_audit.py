"""`tidemark audit --verify-sample` on a keyed table (issue 39 item 7), against the real broker, Spark and Delta:
two batches of inserts, updates and deletes (tombstones and a delete field, a deleted key inserted again, a dead
letter) on two partitions; the sample, through `PipelineRun.audit` as the CLI calls it (the session-wide
SparkSession stands in for the CLI's spark-submit job), finds every key equal to its newest change. Retention then
deletes the start of a partition: a key with no change left is not read, one whose newest change is left still
is. Then the table is damaged with Spark SQL (a column of one row changed, a deleted key inserted again, a row
deleted) and the sample names each key, its newest change's offset and what differs."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from tests import helpers
from tests.integration.test_keyed_tables import Reference, change, keyed_pipeline, produce, run, table
from tidemark import settings
from tidemark.audit.live_table import verdict
from tidemark.connections import EnvironmentResolver
from tidemark.run import PipelineRun
from tidemark_spark.audit_decode import answer_check

pytestmark = pytest.mark.integration


def audit(spark, config, count: int):
    """`tidemark audit PIPELINE --verify-sample COUNT`, its Spark job run in this process's session."""
    kafka = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": helpers.bootstrap()}})
    pipeline = PipelineRun(config, EnvironmentResolver({"AIRFLOW_CONN_KAFKA_DEFAULT": kafka}), settings.ledger_uri(),
                           None)
    properties = pipeline.kafka_properties
    report = pipeline.audit(verify_sample=count, values=lambda check: answer_check(spark, check, properties))
    return report, report.sample


def delete_records_before(topic: str, partition: int, offset: int) -> None:
    """Move the partition's log start offset exactly as retention would."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=helpers.bootstrap())
    try:
        client.delete_records({TopicPartition(topic, partition): offset})
    finally:
        client.close()


def test_the_sample_compares_keys_with_their_newest_change_and_names_damaged_keys(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("keyed-audit"), partitions=2)
    config, ref = keyed_pipeline(topic), Reference()
    produce(topic, ref, [change(1, "a", 1), change(2, "b", 2), change(3, "c", 3)], partition=0)       # 0..2
    produce(topic, ref, [change(10, "x", 10), change(11, "y", 11)], partition=1)                     # 0..1
    helpers.produce_pairs(topic, [(b'{"id": 12}', b'{"name": "no id"}')], partition=1)              # 2: bad
    run(spark, config)
    produce(topic, ref, [change(1, "a2", 5), change(2, "TOMBSTONE"), change(4, "d", 4), change(2, "b3", 7),
                         change(3, "c", op="delete")], partition=0)                                   # 3..7
    produce(topic, ref, [change(11, "y", op="delete"), change(12, "z", 12), change(10, "x2", 20),
                         change(13, "w", 13)], partition=1)                                          # 3..6
    run(spark, config)  # a MERGE: key 2 deleted and inserted again, 3 and 11 deleted, 1 and 10 updated
    assert table(config.table_uri) == ref.rows == {1: ("a2", 5), 2: ("b3", 7), 4: ("d", 4), 10: ("x2", 20),
                                                   12: ("z", 12), 13: ("w", 13)}

    report, sample = audit(spark, config, 100)
    assert report.ok, report.to_dict()
    assert sample == {"requested": 100, "verified": 8, "not_retained": 0, "values_compared": True, "keys_read": 8,
                      "mismatches": []}  # keys 3 and 11 are deleted, and found absent
    _, some = audit(spark, config, 3)  # 3 keys at random
    assert (some["verified"], some["keys_read"], some["mismatches"]) == (3, 8, [])

    # Retention deletes partition 1 before offset 4: key 11 (offsets 1 and 3) is gone from Kafka, key 10 keeps
    # its newest change (5, not 0), key 12 its only one (4); batch 1's and batch 2's ranges there lost their start.
    # And the table is damaged, which only the sample sees.
    delete_records_before(topic, 1, 4)
    spark.sql(f"UPDATE delta.`{config.table_uri}` SET qty = qty + 1 WHERE id = 1")
    (spark.read.format("delta").load(config.table_uri).where("id = 4")  # key 3 again, as batch 1 wrote it
     .withColumns({"id": F.lit(3).cast("bigint"), "name": F.lit("c"), "qty": F.lit(3), "kafka_offset": F.lit(2).cast(
         "bigint"), "ingest_batch_id": F.lit(1).cast("bigint")})
     .write.format("delta").mode("append").save(config.table_uri))
    spark.sql(f"DELETE FROM delta.`{config.table_uri}` WHERE id = 12")
    report, sample = audit(spark, config, 100)
    assert not report.ok and (sample["verified"], sample["keys_read"], sample["not_retained"]) == (7, 7, 2), sample
    assert (report.duplicated_offsets, report.outside_rows, report.duplicate_key_rows) == (0, 0, 0)  # only the sample
    assert sample["mismatches"] == [
        {"key": {"id": 1}, "topic": topic, "partition": 0, "offset": 3, "change": "upsert", "table_rows": 1,
         "columns": ["qty"], "reason": "values differ: qty"},
        {"key": {"id": 3}, "topic": topic, "partition": 0, "offset": 7, "change": "delete", "table_rows": 1,
         "columns": [], "reason": "row present but deleted"},
        {"key": {"id": 12}, "topic": topic, "partition": 1, "offset": 4, "change": "upsert", "table_rows": 0,
         "columns": [], "reason": "row missing"}]
    assert verdict(report).endswith("7 sampled keys (of 7 with a change Kafka still holds; 2 committed ranges no "
                                    "longer retained) compared with their newest change, 3 differing (see the lists "
                                    "above)")
