"""Failover on the three-broker cluster (scripts/kafka_cluster.sh: replication factor 3,
min.insync.replicas=2), over its SSL listener, with the batch protocol in this process (the session's
SparkSession; the launcher is not the subject here).

* The leader of the partition being read is killed (kill -9) while Spark reads it: some of the read's
  tasks are done, others still to run. The read goes on from the new leader, or the batch fails and its
  retry reads the same frozen ranges; either way every record is in the output once.
* A broker lost while the plan asks Kafka for offsets: the plan fails within the pipeline's timeout with
  nothing frozen (the ledger untouched); the next attempt plans the same offsets on the new leader.
* A topic whose min.insync.replicas cannot be met (three, with a broker down): producing with acks=all
  is refused, acks=1 accepted; a run reads up to the high watermark, which Kafka 4 (KIP-966) does not
  move while too few replicas are in sync, or where the lost broker was the leader, the plan may fail
  (OFFSET_NOT_AVAILABLE until its timeout) with nothing frozen. The first runs after the broker is
  back in sync read what was held back, exactly once.

Each test takes the cluster to itself while a broker is down (Cluster.alone) and starts the broker again
before it gives the cluster back."""

from __future__ import annotations

import sys
import threading

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.spark import batch_io
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import KafkaUnavailableError, is_transient
from tidemark.kafka.client import KafkaOffsets
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration


def _pipeline(topic: str, timeout_s: int, **extra):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, "kafka_timeout_seconds": timeout_s,
                           **extra}, "test")


def _output(table_uri: str) -> dict:
    """Rows, distinct (partition, offset) and the batches of the output table."""
    return helpers.query(table_uri, "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, kafka_offset)) AS u, "
                                    "MIN(kafka_offset) AS lo, MAX(kafka_offset) AS hi, "
                                    "COUNT(DISTINCT ingest_batch_id) AS batches FROM t")[0]


def _read_in_background(spark, plan, props) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def execute() -> None:
        try:
            execute_batch(spark, plan, props)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=execute, name="execute-batch", daemon=True)
    thread.start()
    return thread, errors


def _mid_read(spark, thread: threading.Thread):
    """The read's stage once some of its tasks are done and others are not (None if the batch ended first)."""
    tracker = spark.sparkContext.statusTracker()

    def partly_done():
        if not thread.is_alive():
            return "ended"
        for stage in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage)
            if info is not None and info.numTasks > 1 and 0 < info.numCompletedTasks < info.numTasks:
                return info
        return None

    found = helpers.wait_until(partly_done, 300, "the batch's read to have some tasks done and others to do",
                               interval=0.02)
    return None if found == "ended" else found


def _hold_tasks_after(monkeypatch, spark, first_offset: int, gate) -> None:
    """The batch's read holds every record from ``first_offset`` on until the file ``gate`` exists (a Python UDF
    in the read's tasks): the tasks before it finish, the next ones wait after their first fetch, and the stage
    stays part done until the test opens the gate."""
    from pyspark.sql import functions as F

    held = helpers.gate_udf(gate, from_value=first_offset)
    read = batch_io.read_ranges
    monkeypatch.setattr(batch_io, "read_ranges", lambda session, options: read(session, options).where(
        held(F.col("offset"))))
    monkeypatch.setattr(spark.sparkContext, "pythonExec", sys.executable)  # the UDF's workers: this interpreter


def test_the_partition_leader_killed_mid_read_loses_and_duplicates_nothing(kafka_cluster, spark, lake, monkeypatch,
                                                                           tmp_path):
    records, per_task = 20_000, 2_000  # ten read tasks, two at a time: the kill lands between them
    topic = kafka_cluster.create_topic(helpers.unique("failover_read"), partitions=1)
    produced = kafka_cluster.produce(topic, records)
    props = kafka_cluster.connection("ssl", inline=False)
    # 60 s: a reader waits out the leader election (the dead broker is fenced after 9 s) within its timeout
    config = _pipeline(topic, 60, max_offsets_per_spark_task=per_task)
    plan = prepare_batch(config, props)
    assert [(r.partition, r.start, r.end) for r in plan.ranges] == [(0, 0, records)]

    gate = tmp_path / "gate"
    _hold_tasks_after(monkeypatch, spark, 2 * per_task, gate)  # two tasks done, the third and on held
    with kafka_cluster.alone():
        leader = kafka_cluster.leader(topic)
        thread, errors = _read_in_background(spark, plan, props)
        try:
            stage = _mid_read(spark, thread)
            assert stage is not None, "the batch ended before the kill could land mid-read"
            kafka_cluster.kill_broker(leader)
            after_kill = spark.sparkContext.statusTracker().getStageInfo(stage.stageId)
            assert after_kill is not None and after_kill.numCompletedTasks < after_kill.numTasks, \
                "every read task was done before the leader was killed"
            assert helpers.query_or_none(config.table_uri) is None  # nothing committed before the kill
        finally:
            gate.touch()
        thread.join(timeout=600)
        assert not thread.is_alive(), "the batch did not end within 10 minutes of the kill"
        new_leader = kafka_cluster.leader(topic)
        assert new_leader not in (leader, -1), (leader, new_leader)
        if errors:  # the batch failed: a transient error, and the retry reads exactly the same frozen ranges
            assert isinstance(errors[0], KafkaUnavailableError) and is_transient(errors[0]), repr(errors[0])
            retry = prepare_batch(config, props)
            assert (retry.batch_id, retry.ranges) == (plan.batch_id, plan.ranges)
            execute_batch(spark, retry, props)
        kafka_cluster.start_broker(leader)

    assert _output(config.table_uri) == {"n": records, "u": records, "lo": 0, "hi": records - 1, "batches": 1}
    values = helpers.query(config.table_uri, "SELECT value FROM t")
    assert sorted(bytes(v["value"]) for v in values) == sorted(produced)  # none missing, none twice
    state = Ledger(settings.ledger_uri()).state(topic)
    assert state.pending_batch_id is None and state.last_batch_id == 1


def _kill_leader_on_first_offsets_request(monkeypatch, cluster, topic: str) -> list[int]:
    """Kill the topic's leader when the plan, its metadata read, first asks for the partitions' offsets."""
    killed: list[int] = []
    earliest = KafkaOffsets.earliest

    def killing_first(self, tps):
        if not killed:
            killed.append(cluster.leader(topic))
            cluster.kill_broker(killed[0])
        return earliest(self, tps)

    monkeypatch.setattr(KafkaOffsets, "earliest", killing_first)
    return killed


def _end_offset(props, topic: str) -> int:
    """The partition's high watermark as the planner sees it: the offset below which records can be read."""
    with KafkaOffsets(props, timeout_ms=30000) as kafka:
        return kafka.latest([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]


def _produce_with_acks(cluster, topic: str, acks, count: int, start: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap("plaintext"), acks=acks, retries=0,
                             request_timeout_ms=10000)
    try:
        for i in range(start, start + count):
            producer.send(topic, value=f'{{"order_id": {i}}}'.encode()).get(timeout=30)
    finally:
        producer.close()


def test_a_broker_lost_during_plan_freezes_nothing_and_min_insync_replicas_unmet_holds_back_what_is_read(
        kafka_cluster, spark, lake, monkeypatch):
    from kafka.errors import NotEnoughReplicasError

    topic = kafka_cluster.create_topic(helpers.unique("failover_plan"), partitions=1)
    kafka_cluster.produce(topic, 50)
    lost = kafka_cluster.leader(topic)
    others = [n for n in (1, 2, 3) if n != lost]
    # two topics that need all three replicas in sync: one led by the broker about to be lost, one not
    strict = {led: kafka_cluster.create_topic(helpers.unique(f"min_isr_{led}"), configs={"min.insync.replicas": "3"},
                                              replicas=order)
              for led, order in (("lost", [lost, *others]), ("kept", [*others, lost]))}
    for name in strict.values():
        _produce_with_acks(kafka_cluster, name, "all", 30, 0)  # three replicas in sync: accepted
    props = kafka_cluster.connection("ssl", inline=False)
    ledger = Ledger(settings.ledger_uri())

    with kafka_cluster.alone():
        killed = _kill_leader_on_first_offsets_request(monkeypatch, kafka_cluster, topic)
        # 1. the leader dies after the plan read the cluster's metadata: within the 5 s timeout no broker
        # answers for the partition (the election waits 9 s for the dead broker), and nothing is frozen
        with pytest.raises(KafkaUnavailableError) as err:
            prepare_batch(_pipeline(topic, 5), props)
        assert killed == [lost], "the plan never asked for offsets"
        assert is_transient(err.value)
        assert f"pipeline '{topic}'" in str(err.value) and f"{topic}:0" in str(err.value)
        assert "nothing was read or committed" in str(err.value)
        assert ledger.version() == -1  # the ledger untouched: not even created
        # 2. the next attempt, with the default-sized timeout, plans the same offsets on the new leader
        monkeypatch.undo()
        plan = prepare_batch(_pipeline(topic, 60), props)
        assert (plan.batch_id, [(r.partition, r.start, r.end) for r in plan.ranges]) == (1, [(0, 0, 50)])
        assert kafka_cluster.leader(topic) not in (lost, -1)
        _below_min_insync_replicas(kafka_cluster, spark, strict, lost, props, NotEnoughReplicasError)
        kafka_cluster.start_broker(lost)
        _back_in_sync(kafka_cluster, spark, strict, props)


def _below_min_insync_replicas(cluster, spark, strict: dict[str, str], lost: int, props, refused) -> None:
    """3. min.insync.replicas=3 with a broker down: once the dead broker has left the in-sync replicas, a
    producer with acks=all is refused and one with acks=1 accepted. Kafka 4 (KIP-966) moves the high
    watermark only while min.insync.replicas are in sync: a run reads the 30 records below it, none of the
    20 the leader alone acknowledged. Where the lost broker led, the new leader, holding records of its own
    epoch above the high watermark, may not tell it at all (OFFSET_NOT_AVAILABLE, seen in some runs, not
    all): then the plan fails within its timeout, freezing nothing."""
    for name in strict.values():
        helpers.wait_until(lambda name=name: lost not in cluster.partition_state(name)["isr"], 60,
                           f"broker {lost} to leave the in-sync replicas of {name}")
    for name in strict.values():
        with pytest.raises(refused):
            _produce_with_acks(cluster, name, "all", 1, 30)
        _produce_with_acks(cluster, name, 1, 20, 30)
    for name in strict.values():
        try:
            first = prepare_batch(_pipeline(name, 5), props)
        except KafkaUnavailableError as err:  # seen only where the lost broker led; not every time
            assert name == strict["lost"] and f"{name}:0" in str(err) and is_transient(err), str(err)
            assert Ledger(settings.ledger_uri()).state(name).last_batch_id == 0  # nothing frozen
            continue
        assert [(r.start, r.end) for r in first.ranges] == [(0, 30)]
        execute_batch(spark, first, props)
        assert _output(first.table_uri) == {"n": 30, "u": 30, "lo": 0, "hi": 29, "batches": 1}


def _back_in_sync(cluster, spark, strict: dict[str, str], props) -> None:
    """4. the broker back in sync: the high watermarks move, and the next runs read what was held back."""
    for name in strict.values():
        helpers.wait_until(lambda name=name: _end_offset(props, name) == 50, 120, f"{name}'s high watermark at 50")
    for name in strict.values():
        before = Ledger(settings.ledger_uri()).state(name).last_batch_id
        plan = prepare_batch(_pipeline(name, 60), props)
        assert (plan.batch_id, [(r.start, r.end) for r in plan.ranges]) == (before + 1, [(30 if before else 0, 50)])
        execute_batch(spark, plan, props)
        assert _output(plan.table_uri) == {"n": 50, "u": 50, "lo": 0, "hi": 49, "batches": plan.batch_id}
        orders = helpers.query(plan.table_uri, "SELECT CAST(value AS STRING) AS v FROM t")
        assert sorted(int(o["v"].split(": ")[1].rstrip("}")) for o in orders) == list(range(50))
