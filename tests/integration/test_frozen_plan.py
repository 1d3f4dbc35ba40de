"""A frozen batch depends only on its plan (issue 58, part 3), against the real broker, Spark and Delta. The
pipeline file is edited (isolation level and transform) while a batch is half written: its output committed, its
dead letters not (the driver died in between). The next run finishes the batch as it was planned: the dead
letters read with the planned isolation level, so an aborted transaction's bad record stays out, and the output
as the planned transform filtered it. The batch after it follows the file as edited. A batch of which nothing was
written is planned again with the file as it is (the fix of a transform that failed it takes effect):
``test_transforms.py``'s refused transforms, each fixed and run again over the same pending batch. A keyed
batch merges by the keys it was planned with, whatever the file says by the time its job runs."""

from __future__ import annotations

import json

import pytest

from tests import helpers
from tests.integration.test_transforms import SCHEMA, ledger_rows, order, props
from tidemark import settings
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.spark import batch_io
from tidemark.config.pipeline import find_pipeline
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

FILTERING = "SELECT * FROM records WHERE NOT coalesce(is_test, false)"
BAD = b"{not json"


def aborted(topic: str, values: list[bytes]) -> None:
    """Records of a transaction the producer aborts: only a ``read_uncommitted`` read returns them."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=helpers.bootstrap(), transactional_id=helpers.unique("aborted"),
                             enable_idempotence=True)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for value in values:
            producer.send(topic, value=value, partition=0)
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()


def write(folder, topic: str, **settings) -> None:
    (folder / f"{topic}.yaml").write_text(json.dumps({
        "name": topic, "topics": [topic], "table": topic, "value_format": "json", "value_schema": SCHEMA,
        **settings}))


def dead_letters(uri: str) -> int:
    return helpers.query(uri, "SELECT COUNT(*) AS n FROM t")[0]["n"]


def test_a_half_written_batch_is_finished_as_planned_after_its_pipeline_file_changed(kafka_bootstrap, spark, lake,
                                                                                       tmp_path, monkeypatch):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    topic = helpers.create_topic(helpers.unique("frozen-plan"), partitions=1)
    write(folder, topic, transform=FILTERING)  # isolation_level: read_committed, the default
    aborted(topic, [order(100), BAD])
    helpers.produce_values(topic, [order(0), order(1, test=True), BAD, order(3)], partition=0)
    planned = find_pipeline(topic, folder)
    plan = prepare_batch(planned, props(), owner="a run")
    assert (plan.batch_id, plan.isolation_level, plan.format.transform) == (1, "read_committed", FILTERING)

    def killed(*args, **kwargs):  # the driver dies between the output commit and the dead letters
        raise SystemExit("killed after the output commit")

    with monkeypatch.context() as patched, pytest.raises(SystemExit):
        patched.setattr(batch_io, "write_dead_letters", killed)
        execute_batch(spark, plan, props())
    ids = "SELECT order_id FROM t ORDER BY order_id"
    assert [r["order_id"] for r in helpers.query(planned.table_uri, ids)] == [0, 3]
    assert Ledger(settings.ledger_uri()).state(topic).pending_batch_id == 1

    # meanwhile someone edits the file: every record, aborted ones too, and no filter
    write(folder, topic, transform="SELECT * FROM records", isolation_level="read_uncommitted")
    edited = find_pipeline(topic, folder)
    recovered = prepare_batch(edited, props(), owner="a run")  # the run again: it finishes its pending batch
    assert (recovered.batch_id, recovered.ranges) == (1, plan.ranges)
    assert (recovered.isolation_level, recovered.format) == ("read_committed", plan.format)
    execute_batch(spark, recovered, props())
    assert dead_letters(edited.dead_letter_uri) == 1  # the committed bad record; the aborted one stays out
    assert [r["order_id"] for r in helpers.query(edited.table_uri, ids)] == [0, 3]
    assert ledger_rows(topic) == [(1, 0, 4, 1, 1)]  # 4 records: 1 dead letter, 1 filtered, 2 written

    # the batch after it follows the file as it is now: the aborted records read, nothing filtered
    aborted(topic, [order(200), BAD])
    helpers.produce_values(topic, [order(4, test=True)], partition=0)
    following = prepare_batch(edited, props(), owner="a run")
    assert (following.batch_id, following.isolation_level) == (2, "read_uncommitted")
    execute_batch(spark, following, props())
    assert [r["order_id"] for r in helpers.query(edited.table_uri, ids)] == [0, 3, 4, 200]
    assert dead_letters(edited.dead_letter_uri) == 2
    assert ledger_rows(topic)[-1] == (2, 0, 3, 1, 0)


def test_a_keyed_batch_merges_by_the_keys_it_was_planned_with(kafka_bootstrap, spark, lake, tmp_path):
    """The keys are part of the frozen batch: edited between plan and ingest, the batch still merges by the keys
    it was planned with (two orders of one country stay two rows), and the next batch is planned with the new."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    topic = helpers.create_topic(helpers.unique("frozen-keys"), partitions=1)
    write(folder, topic, keyed={"keys": ["order_id"]})
    helpers.produce_values(topic, [order(1, country="fr"), order(2, country="fr")], partition=0)
    plan = prepare_batch(find_pipeline(topic, folder), props(), owner="a run")
    write(folder, topic, keyed={"keys": ["country"]})  # edited before the job runs
    edited = find_pipeline(topic, folder)
    execute_batch(spark, plan, props())
    rows = helpers.query(edited.table_uri, "SELECT order_id, country FROM t ORDER BY order_id")
    assert [(r["order_id"], r["country"]) for r in rows] == [(1, "fr"), (2, "fr")]  # merged by order_id
    helpers.produce_values(topic, [order(3, country="fr")], partition=0)
    following = prepare_batch(edited, props(), owner="a run")
    assert (following.batch_id, following.format.keyed.keys) == (2, ("country",))
