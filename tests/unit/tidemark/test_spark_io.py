"""The Spark Kafka source's options, and the JVM failures Tidemark recognises (tidemark.batch.spark.batch_io)."""

from __future__ import annotations

import pytest

from tidemark.batch.plan import BatchPlan
from tidemark.batch.spark.batch_io import (
    BAD_RECORD_MARK,
    KEY_MOVED_END,
    KEY_MOVED_MARK,
    jvm_failure,
    kafka_source_options,
)
from tidemark.kafka.offsets import OffsetRange

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


# --- jvm_failure: the one place an error's text decides what it was (a JVM error reaches Python as text) ---


class Py4JLike(Exception):
    """What PySpark raises for a JVM failure: the Java class and message inside the text."""


@pytest.mark.parametrize(("text", "kind", "cause"), [
    ("An error occurred while calling o91.save.\n: org.apache.spark.SparkException: Job aborted\n"
     "Caused by: org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed during "
     "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512\n\tat org.apache...",
     "kafka_auth", "SaslAuthenticationException: Authentication failed during authentication due to invalid "
                   "credentials with SASL mechanism SCRAM-SHA-512"),
    ("Caused by: org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed\n",
     "kafka_auth", "the TLS handshake failed (SSL handshake failed)"),
    ("Caused by: org.apache.kafka.common.errors.TimeoutException: Timeout of 15000ms expired before the position "
     "for partition orders-0 could be determined\n", "kafka",
     "TimeoutException: Timeout of 15000ms expired before the position for partition orders-0 could be determined"),
    (f"[USER_RAISED_EXCEPTION] {BAD_RECORD_MARK} orders:1@42: value is not valid JSON SQLSTATE: P0001\n",
     "bad_record", "orders:1@42: value is not valid JSON SQLSTATE: P0001"),
    (f'[USER_RAISED_EXCEPTION] {KEY_MOVED_MARK} cdc:0 cdc:1 {{"id":"a b"}} {KEY_MOVED_END} SQLSTATE: P0001\n',
     "key_moved", 'cdc:0 cdc:1 {"id":"a b"}'),
    ("io.delta.exceptions.ConcurrentTransactionException: [DELTA_CONCURRENT_TRANSACTION] This error occurs "
     "when multiple streaming queries are using the same checkpoint", "concurrent_write",
     "DELTA_CONCURRENT_TRANSACTION"),
    ("[DELTA_PROTOCOL_CHANGED] The protocol version of the Delta table has been changed", "concurrent_write",
     "DELTA_PROTOCOL_CHANGED"),
    ("[DELTA_METADATA_CHANGED] The metadata of the Delta table has been changed", "concurrent_write",
     "DELTA_METADATA_CHANGED"),
    ("java.io.IOException: org.apache.hadoop.fs.s3a.UnknownStoreException: `s3a://no-such-bucket/t': "
     "getFileStatus on s3a://no-such-bucket/t\n", "missing_bucket",
     "UnknownStoreException: `s3a://no-such-bucket/t': getFileStatus on s3a://no-such-bucket/t"),
])
def test_each_jvm_failure_tidemark_acts_on_is_recognised_with_its_cause(text, kind, cause):
    failure = jvm_failure(Py4JLike(text))
    assert (failure.kind, failure.cause) == (kind, cause)


def test_anything_else_is_not_recognised_and_propagates_unchanged():
    assert jvm_failure(Py4JLike("java.lang.OutOfMemoryError: Java heap space")) is None
    assert jvm_failure(ValueError("no JVM here")) is None


def test_a_key_moved_failure_becomes_the_error_naming_the_key_and_both_partitions():
    from tidemark.batch.spark.merge import _key_moved

    error = _key_moved('cdc:0 cdc:1 {"id": "a b"}', "orders")
    assert error.pipeline == "orders" and str(error).startswith(
        "pipeline 'orders': key {\"id\": \"a b\"} is on two partitions (the table's row came from cdc:0, this change "
        "from cdc:1)")
