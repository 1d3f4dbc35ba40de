"""The Spark Kafka source's options (tidemark.spark_io)."""

from __future__ import annotations

from tidemark.batch.plan import BatchPlan
from tidemark.offsets import OffsetRange
from tidemark.spark_io import kafka_source_options

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_the_spark_source_gets_the_jaas_config_and_no_provider_spelling():
    plan = BatchPlan("p", 1, "/t", "/l", [OffsetRange("t", 0, 0, 5)])
    options = kafka_source_options(plan, {"bootstrap.servers": "h:9094", "sasl.mechanism": "SCRAM-SHA-256",
                                          "sasl.username": "alice", "sasl.password": "s3cret-value"})
    assert options["kafka.sasl.jaas.config"] == f'{SCRAM} required username="alice" password="s3cret-value";'
    assert not {"kafka.sasl.username", "kafka.sasl.password"} & set(options)


def test_the_spark_source_ends_its_ranges_without_waiting_on_the_broker_unless_the_connection_says_otherwise():
    plan = BatchPlan("p", 1, "/t", "/l", [OffsetRange("t", 0, 0, 5)])
    assert kafka_source_options(plan, {"bootstrap.servers": "h:9092"})["kafka.fetch.max.wait.ms"] == "10"
    mine = kafka_source_options(plan, {"bootstrap.servers": "h:9092", "fetch.max.wait.ms": "200"})
    assert mine["kafka.fetch.max.wait.ms"] == "200"
