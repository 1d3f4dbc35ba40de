"""Kafka credentials: the two spellings a connection may use, which values count as secrets, and
that none of them reaches an error message or an unmasked log line."""

from __future__ import annotations

import json
import logging

import pytest

from tidemark.batch.plan import BatchPlan
from tidemark.errors import ConfigError
from tidemark.kafka_client import _AuthenticationFailures, client_kwargs, java_client_properties, secret_values
from tidemark.offsets import OffsetRange
from tidemark.spark_io import kafka_source_options

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_airflow_provider_spelling_becomes_a_jaas_config_for_java_and_kafka_python():
    props = {"bootstrap.servers": "h:9094", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512",
             "sasl.username": "alice", "sasl.password": 'pa"ss\\word'}
    java = java_client_properties(props)
    assert java == {"bootstrap.servers": "h:9094", "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.jaas.config": f'{SCRAM} required username="alice" password="pa\\"ss\\\\word";'}
    kwargs = client_kwargs(props)
    assert (kwargs["sasl_mechanism"], kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == \
        ("SCRAM-SHA-512", "alice", 'pa"ss\\word')
    plain = java_client_properties({"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"})
    assert plain["sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")


def test_a_username_and_password_without_a_known_mechanism_is_a_config_error_that_hides_the_password():
    with pytest.raises(ConfigError) as error:
        java_client_properties({"sasl.username": "alice", "sasl.password": "hunter2-secret"})
    assert "sasl.mechanism" in str(error.value) and "hunter2-secret" not in str(error.value)


def test_the_spark_source_gets_the_jaas_config_and_no_provider_spelling():
    plan = BatchPlan("p", 1, "/t", "/l", [OffsetRange("t", 0, 0, 5)])
    options = kafka_source_options(plan, {"bootstrap.servers": "h:9094", "sasl.mechanism": "SCRAM-SHA-256",
                                          "sasl.username": "alice", "sasl.password": "s3cret-value"})
    assert options["kafka.sasl.jaas.config"] == f'{SCRAM} required username="alice" password="s3cret-value";'
    assert not {"kafka.sasl.username", "kafka.sasl.password"} & set(options)


def test_secret_values_are_the_credentials_and_nothing_else():
    props = {"bootstrap.servers": "h:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.jaas.config": f'{SCRAM} required username="alice" password="s3cret-value";',
             "ssl.key.password": "key-pass", "ssl.cafile": "/ca.pem"}
    assert secret_values(props) == [props["sasl.jaas.config"], "s3cret-value", "key-pass"]
    assert secret_values({"bootstrap.servers": "h:9092"}) == []
    assert "p4ssword" in secret_values({"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p4ssword"})


def test_a_sasl_failure_logged_by_kafka_python_is_recognised():
    from kafka.errors import SaslAuthenticationFailedError

    watcher = _AuthenticationFailures()
    exc = SaslAuthenticationFailedError("SaslAuthenticationFailedError: Authentication failed during authentication "
                                        "due to invalid credentials with SASL mechanism SCRAM-SHA-512")
    watcher.handle(logging.LogRecord("kafka.net.manager", logging.WARNING, "m.py", 1,
                                     "Bootstrap connection to %s failed: %s", ("bootstrap-0", exc), None))
    assert watcher.failure == ("SASL authentication failed: Authentication failed during authentication due to "
                               "invalid credentials with SASL mechanism SCRAM-SHA-512")


def test_the_connection_registers_its_credentials_with_airflows_secrets_masker(monkeypatch):
    from airflow.sdk.log import redact

    from tidemark_airflow.connections import kafka_properties

    jaas = f'{SCRAM} required username="alice" password="canary-7f3a9c";'
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_MASKED", json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": "h:9094", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": jaas}}))
    assert kafka_properties("kafka_masked")["sasl.jaas.config"] == jaas
    assert "canary-7f3a9c" not in redact(f"a line with canary-7f3a9c and {jaas}")


def test_the_ingest_task_refuses_masters_that_would_put_credentials_on_the_command_line():
    from tidemark_airflow.operators import refuse_credentials_on_the_command_line

    secured = {"bootstrap.servers": "h:9094", "sasl.jaas.config": f'{SCRAM} required username="a" password="b";'}
    for master in ("yarn", "k8s://https://kube:6443"):
        with pytest.raises(ConfigError, match="command line"):
            refuse_credentials_on_the_command_line(master, secured, "p")
    refuse_credentials_on_the_command_line("local[2]", secured, "p")
    refuse_credentials_on_the_command_line("spark://master:7077", secured, "p")
    refuse_credentials_on_the_command_line("yarn", {"bootstrap.servers": "h:9092"}, "p")


def test_the_ingest_task_refuses_storage_keys_where_they_would_reach_the_command_line():
    from tidemark.storage import ObjectStore
    from tidemark_airflow.operators import refuse_credentials_on_the_command_line

    plain = {"bootstrap.servers": "h:9092"}
    keys = ObjectStore("AKIA1", "s3cret", endpoint_url="http://minio:9000")
    for master in ("yarn", "k8s://https://kube:6443"):
        with pytest.raises(ConfigError, match="storage connection holds a secret key.*IAM role"):
            refuse_credentials_on_the_command_line(master, plain, "p", keys)
        refuse_credentials_on_the_command_line(master, plain, "p", ObjectStore(region="eu-west-1"))  # a role
    refuse_credentials_on_the_command_line("spark://master:7077", plain, "p", keys)


def test_the_spark_source_ends_its_ranges_without_waiting_on_the_broker_unless_the_connection_says_otherwise():
    plan = BatchPlan("p", 1, "/t", "/l", [OffsetRange("t", 0, 0, 5)])
    assert kafka_source_options(plan, {"bootstrap.servers": "h:9092"})["kafka.fetch.max.wait.ms"] == "10"
    mine = kafka_source_options(plan, {"bootstrap.servers": "h:9092", "fetch.max.wait.ms": "200"})
    assert mine["kafka.fetch.max.wait.ms"] == "200"
