"""A frozen batch depends only on its plan (issue 58, part 3), against the real broker, Spark and Delta: the
pipeline file is edited between a batch's planning and its execution (isolation level and transform), and the
batch, executed again by the recovery of the next run, reads and writes as it was planned; the batch after it
follows the file as edited."""

from __future__ import annotations

import json

import pytest

from tests import helpers
from tests.integration.test_transforms import SCHEMA, ledger_rows, order, props
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config import find_pipeline

pytestmark = pytest.mark.integration

FILTERING = "SELECT * FROM records WHERE NOT coalesce(is_test, false)"


def aborted(topic: str, ids: range) -> None:
    """Records of a transaction the producer aborts: only a ``read_uncommitted`` read returns them."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=helpers.bootstrap(), transactional_id=helpers.unique("aborted"),
                             enable_idempotence=True)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in ids:
            producer.send(topic, value=order(i), partition=0)
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()


def write(folder, topic: str, **settings) -> None:
    (folder / f"{topic}.yaml").write_text(json.dumps({
        "name": topic, "topics": [topic], "table": topic, "value_format": "json", "value_schema": SCHEMA,
        **settings}))


def test_a_batch_executed_after_its_pipeline_file_changed_reads_and_writes_as_planned(kafka_bootstrap, spark,
                                                                                        lake, tmp_path):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    topic = helpers.create_topic(helpers.unique("frozen-plan"), partitions=1)
    write(folder, topic, transform=FILTERING)  # isolation_level: read_committed, the default
    aborted(topic, range(100, 103))
    helpers.produce_values(topic, [order(i, test=i == 1) for i in range(4)], partition=0)
    planned = prepare_batch(find_pipeline(topic, folder), props(), owner="a run")
    assert (planned.batch_id, planned.isolation_level, planned.format.transform) == (1, "read_committed", FILTERING)

    # its execution fails (an Airflow task retried, say); meanwhile someone edits the file
    write(folder, topic, transform="SELECT * FROM records", isolation_level="read_uncommitted")
    edited = find_pipeline(topic, folder)
    recovered = prepare_batch(edited, props(), owner="a run")  # the run again: it recovers its pending batch
    assert (recovered.batch_id, recovered.recovered, recovered.ranges) == (1, True, planned.ranges)
    assert (recovered.isolation_level, recovered.format) == ("read_committed", planned.format)
    execute_batch(spark, recovered, props())
    ids = "SELECT order_id FROM t ORDER BY order_id"
    assert [r["order_id"] for r in helpers.query(edited.table_uri, ids)] == [0, 2, 3]  # as planned: no aborted
    assert ledger_rows(topic) == [(1, 0, 4, 0, 1)]  # records, and order 1 filtered

    # the batch after it follows the file as it is now: every record, aborted or test, and nothing filtered
    aborted(topic, range(200, 202))
    helpers.produce_values(topic, [order(4, test=True)], partition=0)
    following = prepare_batch(edited, props())
    assert (following.batch_id, following.isolation_level) == (2, "read_uncommitted")
    execute_batch(spark, following, props())
    assert [r["order_id"] for r in helpers.query(edited.table_uri, ids)] == [0, 2, 3, 4, 200, 201]
    assert ledger_rows(topic)[-1] == (2, 0, 3, 0, 0)
