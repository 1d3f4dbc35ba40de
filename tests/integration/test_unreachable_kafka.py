"""Unreachable or silent Kafka, at plan time and during the Spark read: a clear error naming the
pipeline (and the batch's ranges), within the pipeline's kafka_timeout_seconds, nothing committed;
the next attempt reads the same frozen ranges."""

from __future__ import annotations

import socket
import threading

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import KafkaUnavailableError
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def silent_broker():
    """A TCP port that accepts connections and never answers: a hung broker."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(50)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.5)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def refused_port() -> str:
    return f"127.0.0.1:{helpers.free_port()}"  # nothing listens there: connections are refused


@pytest.mark.parametrize("kind", ["refused", "silent"])
def test_plan_fails_clearly_and_writes_nothing(kind, silent_broker, lake):
    config = parse_pipeline({"name": f"down_{kind}", "topics": ["orders"], "table": "t",
                             "kafka_timeout_seconds": 3}, "test")
    servers = refused_port() if kind == "refused" else silent_broker
    with pytest.raises(KafkaUnavailableError) as err:
        prepare_batch(config, {"bootstrap.servers": servers})
    message = str(err.value)
    assert message.startswith(f"pipeline 'down_{kind}': ")
    assert servers in message and "Nothing was read or committed" in message
    assert err.value.transient
    assert Ledger(settings.ledger_uri()).version() == -1


@pytest.mark.parametrize("kind", ["refused", "silent"])
def test_spark_read_fails_clearly_and_the_retry_reads_the_same_frozen_ranges(kind, silent_broker, kafka_bootstrap,
                                                                             spark, lake):
    topic = helpers.create_topic(helpers.unique(f"readdown_{kind}"), partitions=2)
    helpers.produce(topic, 10)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "kafka_timeout_seconds": 3}, "test")
    good = {"bootstrap.servers": helpers.bootstrap()}
    plan = prepare_batch(config, good, owner="run-1")
    broken = {"bootstrap.servers": refused_port() if kind == "refused" else silent_broker}

    with pytest.raises(KafkaUnavailableError) as err:
        execute_batch(spark, plan, broken)
    message = str(err.value)
    assert f"pipeline '{topic}': batch 1: Spark could not read {topic}:0 [0, 5), {topic}:1 [0, 5)" in message
    assert "TimeoutException" in message and "reads the same frozen ranges" in message
    assert "\tat org.apache" not in message  # the cause, not the Java stack
    assert helpers.query_or_none(config.table_uri) is None
    state = Ledger(settings.ledger_uri()).state(topic)
    assert state.pending_batch_id == 1 and state.positions == {}

    helpers.produce(topic, 4)  # after the freeze: belongs to the next batch
    retry = prepare_batch(config, good, owner="run-1")
    assert (retry.batch_id, retry.ranges) == (plan.batch_id, plan.ranges)
    execute_batch(spark, retry, good)
    assert helpers.query(config.table_uri, "SELECT COUNT(*) AS n FROM t") == [{"n": 10}]
