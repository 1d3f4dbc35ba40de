"""Planning against the real broker and the ledger; the ingest job's run() in-process."""

from __future__ import annotations

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch import mirror_to_consumer_group, partition_status
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.tables import count_batch_records, output_txn_version
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import PipelineBusyError, PlanMismatchError
from tidemark.kafka.offsets import OffsetRange
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration


def make_config(topic: str, **extra):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, **extra}, "test")


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def test_plan_freezes_ranges_up_to_the_latest_offsets_and_records_them(kafka_bootstrap, lake):
    topic = helpers.create_topic(helpers.unique("plan"), partitions=2)
    helpers.produce(topic, 9)
    config = make_config(topic)
    plan = prepare_batch(config, props(), owner="run-1")
    assert plan.batch_id == 1
    assert plan.ranges == [OffsetRange(topic, 0, 0, 5), OffsetRange(topic, 1, 0, 4)]
    state = Ledger(settings.ledger_uri()).state(topic)
    assert state.pending_batch_id == 1 and state.pending_ranges == plan.ranges
    assert {r.dag_run_id for r in Ledger(settings.ledger_uri()).rows(topic)} == {"run-1"}


def test_unfinished_batch_is_planned_again_with_the_same_ranges(kafka_bootstrap, lake):
    topic = helpers.create_topic(helpers.unique("replan"), partitions=1)
    helpers.produce(topic, 5)
    config = make_config(topic)
    first = prepare_batch(config, props(), owner="run-a")
    helpers.produce(topic, 3)  # arrives after the freeze: must not widen batch 1
    again = prepare_batch(config, props(), owner="run-a")  # the same run, retried
    assert again.batch_id == first.batch_id and again.ranges == first.ranges and again.recovered


def test_a_second_run_is_refused_while_the_owner_of_the_pending_batch_is_alive(kafka_bootstrap, lake):
    topic = helpers.create_topic(helpers.unique("busy"), partitions=1)
    helpers.produce(topic, 5)
    config = make_config(topic)
    prepare_batch(config, props(), owner="manual__a")
    ledger = Ledger(settings.ledger_uri())
    before = ledger.version()
    with pytest.raises(PipelineBusyError, match=r"another run holds the pipeline: run 'manual__a' froze batch 1"):
        prepare_batch(config, props(), owner="manual__b", run_state=lambda run_id: "running")
    assert ledger.version() == before


def test_a_dead_owners_batch_is_taken_over_with_the_same_ranges(kafka_bootstrap, lake):
    topic = helpers.create_topic(helpers.unique("takeover"), partitions=2)
    helpers.produce(topic, 6)
    config = make_config(topic)
    first = prepare_batch(config, props(), owner="manual__a")
    helpers.produce(topic, 4)
    again = prepare_batch(config, props(), owner="manual__b", run_state=lambda run_id: "failed")
    assert (again.batch_id, again.ranges, again.owner) == (first.batch_id, first.ranges, "manual__b")
    assert Ledger(settings.ledger_uri()).state(topic).pending_owner == "manual__b"


def test_nothing_new_gives_an_empty_plan_and_writes_nothing(kafka_bootstrap, lake):
    topic = helpers.create_topic(helpers.unique("empty"), partitions=1)
    plan = prepare_batch(make_config(topic), props())
    assert plan.is_empty
    assert Ledger(settings.ledger_uri()).version() == -1


def test_ingest_job_writes_the_batch_and_commits_the_ledger_with_counts(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("job"), partitions=3)
    produced = helpers.produce(topic, 20)
    config = make_config(topic)
    plan = prepare_batch(config, props())
    execute_batch(spark, plan, props())

    rows = Ledger(settings.ledger_uri()).rows(topic)
    assert {r.status for r in rows} == {"committed"}
    assert {r.partition: r.record_count for r in rows} == dict(produced)
    assert count_batch_records(config.table_uri, 1) == {TP(topic, p): n for p, n in produced.items()}
    status = partition_status(config, props())
    assert [(s["partition"], s["committed_offset"], s["lag"], s["last_batch_id"]) for s in status] == [
        (p, helpers.end_offsets(topic)[p], 0, 1) for p in range(3)]

    # The positions are mirrored to the consumer group named after the pipeline.
    assert mirror_to_consumer_group(config, props())
    assert helpers.describe_group(topic) == {p: (helpers.end_offsets(topic)[p], 0) for p in range(3)}

    # A retry of the same job (the output already holds the batch) only confirms the ledger.
    execute_batch(spark, plan, props())
    assert helpers.query(config.table_uri, "SELECT COUNT(*) AS n FROM t")[0]["n"] == 20


def test_ingest_job_refuses_a_plan_the_ledger_did_not_freeze(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("mismatch"), partitions=1)
    helpers.produce(topic, 4)
    plan = prepare_batch(make_config(topic), props())
    widened = type(plan)(**{**plan.__dict__, "ranges": [OffsetRange(topic, 0, 0, 4 + 1)]})
    with pytest.raises(PlanMismatchError, match="not the ledger's pending batch"):
        execute_batch(spark, widened, props())
    someone_else = type(plan)(**{**plan.__dict__, "owner": "not-the-owner"})
    with pytest.raises(PipelineBusyError, match="another run holds the pipeline"):
        execute_batch(spark, someone_else, props())
    assert output_txn_version(plan.table_uri, plan.pipeline) is None


def test_a_failed_mirror_is_logged_and_never_fails_the_run(kafka_bootstrap, spark, lake, caplog):
    topic = helpers.create_topic(helpers.unique("mirror"), partitions=1)
    helpers.produce(topic, 3)
    config = make_config(topic, kafka_timeout_seconds=2)
    execute_batch(spark, prepare_batch(config, props()), props())
    unreachable = {"bootstrap.servers": "127.0.0.1:1"}
    assert mirror_to_consumer_group(config, unreachable) is False
    assert "could not mirror offsets to consumer group" in caplog.text
    assert Ledger(settings.ledger_uri()).state(topic).positions == {TP(topic, 0): 3}


def test_raw_values_are_written_in_one_pass_that_counts_what_it_read(kafka_bootstrap, spark, lake, caplog):
    topic = helpers.create_topic(helpers.unique("onepass"), partitions=2)
    produced = helpers.produce(topic, 12)
    config = make_config(topic)
    plan = prepare_batch(config, props())
    with caplog.at_level("INFO", logger="tidemark"):
        execute_batch(spark, plan, props())
    # no count before the write (that is the JSON path's "read N records (B bad)"); the write counted 12
    assert "records (0 bad)" not in caplog.text
    assert f"batch 1 committed to {config.table_uri} (12 records read from 12 offsets)" in caplog.text
    assert {r.partition: r.record_count for r in Ledger(settings.ledger_uri()).rows(topic)} == dict(produced)


def _fake_output(table_uri: str, topic: str, offsets: list[int], batch_id: int = 1) -> None:
    """Rows of a batch written straight to the output with delta-rs, as a broken writer might."""
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(table_uri, pa.table({"kafka_topic": [topic] * len(offsets), "kafka_partition": [0] * len(offsets),
                                         "kafka_offset": offsets, "ingest_batch_id": [batch_id] * len(offsets)}))


@pytest.mark.parametrize(("offsets", "records_read", "bad_read", "message"), [
    ([0, 1, 7], None, None, r"the output and dead-letter tables hold 3 records with offsets 0\.\.7 for the frozen "
                            r"range \[0, 5\) of batch 1; the ledger was not committed"),
    ([0, 1, 2], 5, None, r"batch 1: Spark read 5 records from Kafka for .* but the output and dead-letter tables "
                         r"hold 3; the ledger was not committed"),
    ([0, 1, 2], 3, 1, r"batch 1: Spark found 1 bad records in \S+:0 \[0, 5\) but the dead-letter table holds 0; "
                      r"the ledger was not committed"),
])
def test_the_ledger_is_not_committed_when_the_tables_disagree_with_the_batch(kafka_bootstrap, lake, offsets,
                                                                               records_read, bad_read, message):
    from tidemark.batch.finalize import finalize_batch
    from tidemark.errors import ReconciliationError

    topic = helpers.create_topic(helpers.unique("disagree"), partitions=1)
    helpers.produce(topic, 5)
    plan = prepare_batch(make_config(topic), props())
    _fake_output(plan.table_uri, topic, offsets)
    ledger = Ledger(settings.ledger_uri())
    before = ledger.version()
    with pytest.raises(ReconciliationError, match=message):
        finalize_batch(plan, records_read=records_read, bad_read=bad_read)
    assert ledger.version() == before and ledger.state(topic).pending_batch_id == 1
