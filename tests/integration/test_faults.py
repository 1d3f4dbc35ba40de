"""When Kafka misbehaves, against the real broker, Spark and Delta: retention deleting offsets
before they were read, partitions added to a topic, a topic deleted and recreated, transactions
(aborted records, open transactions, control markers) and compaction. Each checks that nothing is
lost silently, nothing is duplicated, and that an error names pipeline, topic, partition and
offsets and says what to do."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.reset import ResetRequest, reset_offsets
from tidemark.batch.status import partition_status
from tidemark.batch.tables import output_txn_version
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import DataLossError, TopicRecreatedError
from tidemark.kafka.offsets import OffsetRange
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def make_config(topic: str, name: str | None = None, **extra):
    name = name or topic
    return parse_pipeline({"name": name, "topics": [topic], "table": name, **extra}, "test")


def run_batch(config, spark):
    """Plan and execute one batch in-process; returns the plan."""
    plan = prepare_batch(config, props())
    assert not plan.is_empty
    execute_batch(spark, plan, props())
    return plan


def output(config) -> list[tuple[int, int, int]]:
    """(partition, offset, batch) of every output row, sorted."""
    rows = helpers.query(config.table_uri, "SELECT kafka_partition AS p, kafka_offset AS o, ingest_batch_id AS b "
                                           "FROM t ORDER BY p, o, b")
    return [(r["p"], r["o"], r["b"]) for r in rows]


def ledger_rows(pipeline: str) -> list[tuple]:
    """(batch, kind, status, partition, start, end, record_count) of the pipeline's ledger rows."""
    return sorted((r.batch_id, r.kind, r.status, r.partition, r.start_offset, r.end_offset, r.record_count)
                  for r in Ledger(settings.ledger_uri()).rows(pipeline))


def admin():
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=helpers.bootstrap())


def offsets(topic: str, isolation_level: str = "read_committed") -> dict[int, tuple[int, int]]:
    """partition -> (earliest, latest) as a consumer of that isolation level sees them."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=helpers.bootstrap(), isolation_level=isolation_level)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        first, last = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        return {tp.partition: (first[tp], last[tp]) for tp in tps}
    finally:
        consumer.close()


def set_topic_config(topic: str, configs: dict[str, str]) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    client = admin()
    try:
        client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)])

        def applied() -> bool:
            found = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
            return all(found.get(key, {}).get("value") == value for key, value in configs.items())

        helpers.wait_until(applied, 30, f"the broker to report topic {topic}'s configs {configs}")
    finally:
        client.close()


def topic_id(topic: str) -> str:
    client = admin()
    try:
        return client.describe_topics([topic])[0]["topic_id"]
    finally:
        client.close()


def printed(topic_id: str) -> str:
    """A topic id as Kafka's own tools print it (`kafka-topics --describe`): URL-safe base64 of its 16
    bytes, no padding."""
    return base64.urlsafe_b64encode(uuid.UUID(topic_id).bytes).rstrip(b"=").decode()


def refused_plan(config, error: type[Exception]) -> str:
    """Plan a batch that must be refused with ``error``; check the ledger and the output are untouched
    and return the error's message."""
    ledger = Ledger(settings.ledger_uri())
    before, output_version = ledger.version(), helpers.table_version(config.table_uri)
    with pytest.raises(error) as err:
        prepare_batch(config, props())
    assert (ledger.version(), helpers.table_version(config.table_uri)) == (before, output_version)
    return str(err.value)


def history(tmp_path, monkeypatch, capsys, config) -> list[dict]:
    """`tidemark offsets history PIPELINE --json` against the test's lake, with a pipeline file for
    ``config``: in this process, through the function the installed `tidemark` console script calls
    (the command runs as a real process in test_replay)."""
    from importlib.metadata import entry_points

    (command,) = entry_points(group="console_scripts", name="tidemark")
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir(exist_ok=True)
    (pipelines / f"{config.name}.yaml").write_text(json.dumps(
        {"name": config.name, "topics": config.topics, "table": config.name, "on_data_loss": config.on_data_loss}))
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(pipelines))
    capsys.readouterr()
    assert command.load()(["offsets", "history", config.name, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# --- 1. retention deletes offsets before they were read -------------------------------------------

def test_retention_gap_fails_the_plan_by_default_and_skip_records_it_and_continues(kafka_bootstrap, spark, lake,
                                                                                   tmp_path, monkeypatch, capsys):
    topic = helpers.create_topic(helpers.unique("retention"), partitions=2, configs={"retention.ms": "-1"})
    helpers.produce(topic, 10)                       # offsets 0..4 on each partition
    config = make_config(topic)
    run_batch(config, spark)                         # batch 1: [0, 5) x 2
    helpers.produce(topic, 10, start=10)             # offsets 5..9: never read before retention deletes them

    # Real retention: every segment older than 100 ms goes (the broker checks every 5 s).
    set_topic_config(topic, {"retention.ms": "100"})
    helpers.wait_until(lambda: offsets(topic) == {0: (10, 10), 1: (10, 10)}, 60, "retention to delete offsets 0..9")
    set_topic_config(topic, {"retention.ms": "-1"})
    helpers.produce(topic, 4, start=20)              # offsets 10, 11 on each partition
    assert offsets(topic) == {0: (10, 12), 1: (10, 12)}

    ledger = Ledger(settings.ledger_uri())
    before = ledger.version()
    assert refused_plan(config, DataLossError) == (
        f"pipeline '{topic}': offsets {topic}:0 [5, 10), {topic}:1 [5, 10) were deleted by retention before they "
        f"were ingested (10 offsets lost). Nothing was read or written. Either replay from what is left "
        f"('tidemark offsets reset {topic} --topic {topic}:0 --topic {topic}:1 --to-earliest --execute --reason "
        f"\"...\"': an audited reset row) or set 'on_data_loss: skip' in the pipeline file to record each lost range "
        f"as a 'gap' row in the ledger and continue from the earliest offset Kafka has.")

    skipping = make_config(topic, on_data_loss="skip")
    plan = prepare_batch(skipping, props())
    assert plan.batch_id == 3 and plan.ranges == [OffsetRange(topic, 0, 10, 12), OffsetRange(topic, 1, 10, 12)]
    # The gap is committed in the same ledger commit that froze batch 3: the position is the gap's end.
    assert ledger.version() == before + 1
    assert [(s["partition"], s["committed_offset"], s["latest_offset"], s["lag"], s["last_batch_id"])
            for s in partition_status(skipping, props())] == [(0, 10, 12, 2, 2), (1, 10, 12, 2, 2)]
    execute_batch(spark, plan, props())

    assert output(config) == sorted([(p, o, 1) for p in (0, 1) for o in range(5)]
                                    + [(p, o, 3) for p in (0, 1) for o in (10, 11)])
    # nothing was written for the lost offsets: the gap accounts for them
    assert ledger_rows(topic) == [
        (1, "batch", "committed", 0, 0, 5, 5), (1, "batch", "committed", 1, 0, 5, 5),
        (2, "gap", "committed", 0, 5, 10, 0), (2, "gap", "committed", 1, 5, 10, 0),
        (3, "batch", "committed", 0, 10, 12, 2), (3, "batch", "committed", 1, 10, 12, 2)]

    assert [(h["batch_id"], h["kind"], h["partition"], h["start_offset"], h["end_offset"], h["record_count"],
             h["reason"]) for h in history(tmp_path, monkeypatch, capsys, skipping)] == [
        (3, "batch", 0, 10, 12, 2, None), (3, "batch", 1, 10, 12, 2, None),
        (2, "gap", 0, 5, 10, 0, "offsets [5, 10) deleted by retention before they were ingested (on_data_loss: skip)"),
        (2, "gap", 1, 5, 10, 0, "offsets [5, 10) deleted by retention before they were ingested (on_data_loss: skip)"),
        (1, "batch", 0, 0, 5, 5, None), (1, "batch", 1, 0, 5, 5, None)]
    # what `tidemark offsets show PIPELINE --json` prints (the command runs as a real process in test_replay)
    assert json.loads(json.dumps(partition_status(skipping, props()))) == [
        {"topic": topic, "partition": p, "committed_offset": 12, "latest_offset": 12, "lag": 0, "last_batch_id": 3,
         "held_by_open_transactions": 0, "held_since": None} for p in (0, 1)]
    assert prepare_batch(skipping, props()).is_empty  # the gap is recorded once


def test_a_gap_on_one_partition_leaves_the_others_alone_and_is_recorded_even_with_nothing_to_read(
        kafka_bootstrap, spark, lake):
    from kafka import TopicPartition

    topic = helpers.create_topic(helpers.unique("deleted"), partitions=2)
    helpers.produce(topic, 6)                        # 0..2 on each partition
    config = make_config(topic, on_data_loss="skip")
    run_batch(config, spark)
    helpers.produce(topic, 14, start=6)              # 3..9 on each partition
    client = admin()
    try:  # the log start offset moves exactly as retention would move it
        client.delete_records({TopicPartition(topic, 0): 6})
    finally:
        client.close()
    assert offsets(topic) == {0: (6, 10), 1: (0, 10)}

    plan = run_batch(config, spark)
    assert (plan.batch_id, plan.ranges) == (3, [OffsetRange(topic, 0, 6, 10), OffsetRange(topic, 1, 3, 10)])
    assert output(config) == sorted([(0, o, 1) for o in range(3)] + [(0, o, 3) for o in range(6, 10)]
                                    + [(1, o, 1) for o in range(3)] + [(1, o, 3) for o in range(3, 10)])
    assert ledger_rows(topic)[2:] == [
        (2, "gap", "committed", 0, 3, 6, 0),
        (3, "batch", "committed", 0, 6, 10, 4), (3, "batch", "committed", 1, 3, 10, 7)]

    # Everything new deleted before a run: the gap alone is recorded, no batch is planned, no Spark.
    helpers.produce_values(topic, [b"x", b"y"], partition=1)  # offsets 10, 11
    client = admin()
    try:
        client.delete_records({TopicPartition(topic, 1): 12})
    finally:
        client.close()
    output_version = helpers.table_version(config.table_uri)
    assert prepare_batch(config, props()).is_empty
    assert ledger_rows(topic)[-1] == (4, "gap", "committed", 1, 10, 12, 0)
    assert helpers.table_version(config.table_uri) == output_version
    assert [(s["partition"], s["committed_offset"], s["lag"], s["last_batch_id"])
            for s in partition_status(config, props())] == [(0, 10, 0, 3), (1, 12, 0, 4)]


# --- 2. partitions added to a topic ---------------------------------------------------------------

def test_partitions_added_to_a_topic_are_read_from_the_earliest_offset(kafka_bootstrap, spark, lake):
    from kafka import KafkaConsumer
    from kafka.admin import NewPartitions

    topic = helpers.create_topic(helpers.unique("grow"), partitions=1)
    helpers.produce(topic, 4)
    config = make_config(topic)
    run_batch(config, spark)

    client = admin()
    try:
        client.create_partitions({topic: NewPartitions(total_count=3)})
    finally:
        client.close()

    def three_partitions():
        consumer = KafkaConsumer(bootstrap_servers=helpers.bootstrap())
        try:
            return consumer.partitions_for_topic(topic) == {0, 1, 2}
        finally:
            consumer.close()

    helpers.wait_until(three_partitions, 30, "the new partitions in the metadata")
    assert helpers.produce(topic, 9, start=4) == {0: 3, 1: 3, 2: 3}

    # Visible before the next run: never committed, lag counted from the earliest offset.
    assert [(s["partition"], s["committed_offset"], s["latest_offset"], s["lag"], s["last_batch_id"])
            for s in partition_status(config, props())] == [(0, 4, 7, 3, 1), (1, None, 3, 3, None),
                                                            (2, None, 3, 3, None)]
    plan = run_batch(config, spark)
    assert (plan.batch_id, plan.ranges) == (2, [OffsetRange(topic, 0, 4, 7), OffsetRange(topic, 1, 0, 3),
                                                OffsetRange(topic, 2, 0, 3)])
    assert output(config) == sorted([(0, o, 1) for o in range(4)] + [(0, o, 2) for o in range(4, 7)]
                                    + [(p, o, 2) for p in (1, 2) for o in range(3)])
    assert [(s["partition"], s["committed_offset"], s["lag"], s["last_batch_id"])
            for s in partition_status(config, props())] == [(0, 7, 0, 2), (1, 3, 0, 2), (2, 3, 0, 2)]


# --- 3. a topic deleted and recreated -------------------------------------------------------------

def recreate(topic: str, partitions: int) -> None:
    from kafka.errors import TopicAlreadyExistsError

    client = admin()
    try:
        client.delete_topics([topic])
    finally:
        client.close()

    def created():
        try:
            helpers.create_topic(topic, partitions=partitions)
            return True
        except TopicAlreadyExistsError:  # still being deleted
            return False

    helpers.wait_until(created, 60, f"topic {topic} to be recreated")


def test_a_recreated_topic_is_refused_even_with_more_records_until_a_reset_moves_onto_it(kafka_bootstrap, spark,
                                                                                          lake):
    topic = helpers.create_topic(helpers.unique("recreate"), partitions=1)
    helpers.produce(topic, 5)
    config = make_config(topic)
    run_batch(config, spark)
    old_id = topic_id(topic)
    assert {r.topic_id for r in Ledger(settings.ledger_uri()).rows(topic)} == {old_id}

    recreate(topic, partitions=1)
    helpers.produce_values(topic, [f"new-{i}".encode() for i in range(8)])  # more records than before: 0..7
    new_id = topic_id(topic)
    assert new_id != old_id and offsets(topic) == {0: (0, 8)}

    assert refused_plan(config, TopicRecreatedError) == (
        f"pipeline '{topic}': topic '{topic}' was deleted and recreated: Kafka's topic id is now {printed(new_id)} "
        f"(as `kafka-topics --describe` prints it), but the ledger's offsets (committed: {topic}:0@5) belong to topic "
        f"id {printed(old_id)}; Kafka's latest offsets now: "
        f"{topic}:0@8. Offsets of the new topic number other records, so nothing was read or written. After "
        f"checking what happened to the topic, move the pipeline onto the new topic with 'tidemark offsets reset "
        f"{topic} --topic {topic} --to-earliest --execute --reason \"topic recreated\"' (or --to-latest to skip what "
        f"the new topic already holds); the reset records the new topic id.")

    # The way out: an audited reset onto the new topic.
    reset_offsets(config, props(), ResetRequest("to-earliest", (topic,), execute=True, reason="topic recreated",
                                                owner="test"))
    plan = run_batch(config, spark)
    assert (plan.batch_id, plan.ranges, plan.dedupe) == (3, [OffsetRange(topic, 0, 0, 8)], False)
    # offsets 0..4 of the old topic and 0..7 of the new one are different records: all are kept
    assert output(config) == sorted([(0, o, 1) for o in range(5)] + [(0, o, 3) for o in range(8)])
    assert helpers.query(config.table_uri, "SELECT CAST(value AS STRING) AS v FROM t WHERE ingest_batch_id = 3 "
                                           "ORDER BY kafka_offset") == [{"v": f"new-{i}"} for i in range(8)]
    assert [(r[0], r[1], r[4], r[5], r[6]) for r in ledger_rows(topic)] == [
        (1, "batch", 0, 5, 5), (2, "reset", 5, 0, 0), (3, "batch", 0, 8, 8)]
    assert {r.batch_id: r.topic_id for r in Ledger(settings.ledger_uri()).rows(topic)} == {
        1: old_id, 2: new_id, 3: new_id}


def test_a_batch_frozen_before_the_topic_was_recreated_is_not_executed(kafka_bootstrap, lake):
    topic = helpers.create_topic(helpers.unique("recreated_pending"), partitions=1)
    helpers.produce(topic, 3)
    config = make_config(topic)
    frozen = prepare_batch(config, props(), owner="run-1")
    recreate(topic, partitions=1)
    helpers.produce(topic, 3)  # the same offsets exist again: only the topic id tells them apart
    with pytest.raises(TopicRecreatedError, match=rf"topic '{topic}' was deleted and recreated.*Batch "
                                                  rf"{frozen.batch_id} was frozen against the old topic"):
        prepare_batch(config, props(), owner="run-1")


# --- 4. transactions and compaction ---------------------------------------------------------------

def transactional_producer(name: str):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=helpers.bootstrap(), transactional_id=helpers.unique(name),
                             enable_idempotence=True)
    producer.init_transactions()
    return producer


def transaction(producer, topic: str, values: list[bytes], *, commit: bool) -> None:
    producer.begin_transaction()
    for v in values:
        producer.send(topic, value=v, partition=0)
    producer.flush()  # the records reach the log before the marker, aborted or not
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()


def test_aborted_records_never_appear_and_control_markers_anywhere_in_a_batch_are_counted_right(
        kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("txn"), partitions=1)
    producer = transactional_producer("txn")
    try:
        transaction(producer, topic, [b"c0", b"c1", b"c2"], commit=True)   # 0, 1, 2 + commit marker 3
        transaction(producer, topic, [b"a0", b"a1"], commit=False)         # 4, 5 aborted + abort marker 6
        transaction(producer, topic, [b"c3", b"c4"], commit=True)          # 7, 8 + commit marker 9
    finally:
        producer.close()
    assert offsets(topic) == offsets(topic, "read_uncommitted") == {0: (0, 10)}

    # One batch over everything: markers and aborted records in the middle, a marker last.
    whole = make_config(topic)
    plan = run_batch(whole, spark)
    assert plan.ranges == [OffsetRange(topic, 0, 0, 10)]
    assert output(whole) == [(0, o, 1) for o in (0, 1, 2, 7, 8)]
    assert helpers.query(whole.table_uri, "SELECT CAST(value AS STRING) AS v FROM t ORDER BY kafka_offset") == [
        {"v": v} for v in ("c0", "c1", "c2", "c3", "c4")]
    assert ledger_rows(topic) == [(1, "batch", "committed", 0, 0, 10, 5)]

    # Batches cut at markers (capped runs after resets): a batch of only a marker, then one starting
    # with a marker.
    sliced = make_config(topic, name=f"{topic}_sliced", max_offsets_per_run=1)
    reset_offsets(sliced, props(), ResetRequest("to-offset", offset=3, execute=True, reason="to the marker",
                                                owner="test"))
    only_marker = run_batch(sliced, spark)
    assert only_marker.ranges == [OffsetRange(topic, 0, 3, 4)]
    reset_offsets(sliced, props(), ResetRequest("to-offset", offset=6, execute=True, reason="to the abort marker",
                                                owner="test"))
    marker_first = run_batch(make_config(topic, name=sliced.name, max_offsets_per_run=3), spark)
    assert marker_first.ranges == [OffsetRange(topic, 0, 6, 9)]
    assert output(sliced) == [(0, 7, marker_first.batch_id), (0, 8, marker_first.batch_id)]
    assert ledger_rows(sliced.name) == [
        (1, "reset", "committed", 0, 3, 3, 0), (2, "batch", "committed", 0, 3, 4, 0),
        (3, "reset", "committed", 0, 4, 6, 0), (4, "batch", "committed", 0, 6, 9, 2)]
    assert output_txn_version(sliced.table_uri, sliced.name) == 4  # the empty batch 2 committed its marker too


def test_an_open_transaction_holds_the_batch_end_at_the_last_stable_offset(kafka_bootstrap, spark, lake):
    from kafka import KafkaProducer

    topic = helpers.create_topic(helpers.unique("lso"), partitions=1)
    committed, open_txn = transactional_producer("lso-a"), transactional_producer("lso-b")
    plain = KafkaProducer(bootstrap_servers=helpers.bootstrap())
    try:
        transaction(committed, topic, [b"c0", b"c1"], commit=True)        # 0, 1 + marker 2
        open_txn.begin_transaction()
        for v in (b"t0", b"t1"):                                         # 3, 4: not committed yet
            open_txn.send(topic, value=v, partition=0)
        open_txn.flush()
        plain.send(topic, value=b"p0", partition=0)                      # 5: after the open transaction
        plain.flush()
        assert offsets(topic) == {0: (0, 3)} and offsets(topic, "read_uncommitted") == {0: (0, 6)}

        config = make_config(topic)
        first = run_batch(config, spark)
        assert first.ranges == [OffsetRange(topic, 0, 0, 3)]
        assert prepare_batch(config, props()).is_empty               # held back while the transaction is open
        open_txn.commit_transaction()                                    # marker 6
    finally:
        for producer in (committed, open_txn, plain):
            producer.close()
    second = run_batch(config, spark)
    assert second.ranges == [OffsetRange(topic, 0, 3, 7)]
    assert output(config) == [(0, 0, 1), (0, 1, 1), (0, 3, 2), (0, 4, 2), (0, 5, 2)]
    assert ledger_rows(topic) == [(1, "batch", "committed", 0, 0, 3, 2), (2, "batch", "committed", 0, 3, 7, 3)]


def test_a_compacted_topic_leaves_offset_gaps_that_are_counted_not_assumed(kafka_bootstrap, spark, lake):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = helpers.create_topic(helpers.unique("compact"), partitions=1, configs={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"})
    producer = KafkaProducer(bootstrap_servers=helpers.bootstrap())
    keys = ["k1", "a", "k1", "b", "k2", "c", "k2"]                       # offsets 0..6
    first = helpers.past_ms(60)
    for i, key in enumerate(keys):
        producer.send(topic, key=key.encode(), value=f"{key}-{i}".encode(), partition=0, timestamp_ms=first)
    producer.flush()
    # 7: a timestamp past segment.ms after the segment's first record rolls the segment so it can be cleaned
    producer.send(topic, key=b"z", value=b"z-7", partition=0, timestamp_ms=first + 1000)
    producer.flush()
    producer.close()

    seen: list[list[int]] = []

    def compacted():
        consumer = KafkaConsumer(bootstrap_servers=helpers.bootstrap(), consumer_timeout_ms=1000)
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            seen.append([m.offset for m in consumer])
        finally:
            consumer.close()
        # the cleaner keeps the newest record per key: 0 (k1) and 4 (k2) go, a gap first and one in the middle
        return seen[-1] == [1, 2, 3, 5, 6, 7]

    helpers.wait_until(compacted, 90, lambda: f"the log cleaner to compact the topic (offsets seen last: {seen[-1]})")
    assert offsets(topic) == {0: (0, 8)}

    capped = make_config(topic, max_offsets_per_run=1)
    hole = run_batch(capped, spark)                                       # [0, 1): compacted away entirely
    assert hole.ranges == [OffsetRange(topic, 0, 0, 1)]
    rest = run_batch(make_config(topic), spark)
    assert rest.ranges == [OffsetRange(topic, 0, 1, 8)]
    assert output(capped) == [(0, o, 2) for o in (1, 2, 3, 5, 6, 7)]
    assert helpers.query(capped.table_uri, "SELECT CAST(kafka_key AS STRING) AS k FROM t ORDER BY kafka_offset") == [
        {"k": k} for k in ("a", "k1", "b", "c", "k2", "z")]
    assert ledger_rows(topic) == [(1, "batch", "committed", 0, 0, 1, 0), (2, "batch", "committed", 0, 1, 8, 6)]
