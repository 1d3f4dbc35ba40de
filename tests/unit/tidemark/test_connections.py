"""Connections reach the core as plain values through a resolver; without Airflow, from the same
AIRFLOW_CONN_* variables Airflow reads (JSON or URI form)."""

from __future__ import annotations

import json

import pytest

from tidemark import connections
from tidemark.connections import EnvironmentResolver, parse_connection
from tidemark.errors import ConfigError


def resolver(**conns: str) -> EnvironmentResolver:
    return EnvironmentResolver({f"AIRFLOW_CONN_{k.upper()}": v for k, v in conns.items()})


def test_json_form_with_extra_as_an_object_or_a_string():
    extra = {"bootstrap.servers": "h:9092", "security.protocol": "SASL_PLAINTEXT"}
    for value in (extra, json.dumps(extra)):
        conn = parse_connection("k", json.dumps({"conn_type": "kafka", "extra": value}))
        assert (conn.conn_type, dict(conn.extra)) == ("kafka", extra)


def test_uri_form_with_credentials_and_query_extras():
    conn = parse_connection("s", "aws://AKIA%2FX:se%40cret@/?region_name=eu-west-1&endpoint_url=http%3A%2F%2Fh%3A9000")
    assert (conn.conn_type, conn.login, conn.password) == ("aws", "AKIA/X", "se@cret")
    assert conn.extra == {"region_name": "eu-west-1", "endpoint_url": "http://h:9000"}
    assert "se@cret" not in repr(conn)  # the password never shows in a repr (logs, tracebacks)


def test_a_missing_connection_says_how_to_define_it():
    with pytest.raises(ConfigError, match=r"connection 'kafka_prod' is not defined.*AIRFLOW_CONN_KAFKA_PROD"):
        resolver().get("kafka_prod", "orders")


def test_broken_json_names_the_variable():
    with pytest.raises(ConfigError, match="AIRFLOW_CONN_KAFKA_DEFAULT is not valid JSON"):
        resolver(kafka_default='{"conn_type": "kafka",').get("kafka_default")


def test_kafka_properties_from_extra_or_from_host_and_port():
    env = resolver(a=json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "x:1", "acks": 1}}),
                   b=json.dumps({"conn_type": "kafka", "host": "broker", "port": 9093}),
                   c=json.dumps({"conn_type": "kafka"}))
    assert connections.kafka_properties(env, "a") == {"bootstrap.servers": "x:1", "acks": "1"}
    assert connections.kafka_properties(env, "b") == {"bootstrap.servers": "broker:9093"}
    with pytest.raises(ConfigError, match="'c' has no 'bootstrap.servers'"):
        connections.kafka_properties(env, "c", "orders")


@pytest.mark.parametrize(("conn", "master"), [
    ({"conn_type": "spark", "host": "local[2]"}, "local[2]"),
    ({"conn_type": "spark", "host": "spark://m", "port": 7077}, "spark://m:7077"),
    ({"conn_type": "spark", "host": "yarn"}, "yarn"),
    ({"conn_type": "spark"}, "local[*]"),
])
def test_spark_master_as_the_spark_provider_reads_it(conn, master):
    assert connections.spark_master(resolver(spark_default=json.dumps(conn)), "spark_default") == master


@pytest.mark.parametrize(("conn", "url"), [
    ({"host": "127.0.0.1"}, "sc://127.0.0.1:15002/"),
    ({"host": "sc://spark.internal", "port": 15010}, "sc://spark.internal:15010/"),
    ({"host": "h", "port": 1, "login": "etl", "password": "t/k", "extra": {"use_ssl": True}},
     "sc://h:1/;user_id=etl;token=t/k;use_ssl=True"),
])
def test_a_spark_connect_connection_is_the_servers_url_as_the_spark_provider_builds_it(conn, url):
    """The warm path's master: what the provider's SparkConnectHook.get_connection_url makes of it
    (which leaves a missing port to pyspark's default, 15002, where Tidemark spells it out)."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    value = json.dumps({"conn_type": "spark_connect", **conn})
    assert connections.spark_master(resolver(spark=value), "spark") == url
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CONN_SPARK_CHECK", value)
        provider = SparkConnectHook("spark_check").get_connection_url()
    assert provider == (url if "port" in conn else url.replace(":15002", ""))


def test_a_spark_connect_connection_without_a_host_is_refused():
    with pytest.raises(ConfigError, match="no host"):
        connections.spark_master(resolver(spark=json.dumps({"conn_type": "spark_connect"})), "spark")


@pytest.mark.parametrize(("extra", "message"), [
    ({"bootstrap.servers": "kafka"}, "bootstrap.servers entry 'kafka' has no port; write host:port, e.g. kafka:9092"),
    ({"bootstrap.servers": "a:9092, b"}, "bootstrap.servers entry 'b' has no port"),
    ({"bootstrap.servers": "a:90x2"}, "bootstrap.servers entry 'a:90x2' has no port"),
    ({"bootstrap.servers": "a:9092", "security.protocol": "SASL_TLS"},
     "security.protocol 'SASL_TLS' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
])
def test_kafka_settings_kafkas_java_client_would_refuse_inside_spark_are_refused_when_read(extra, message):
    """kafka-python fills in a missing port (so planning worked and froze a batch) where Kafka's Java client
    in the Spark job refuses it: the connection is checked when it is read, before anything is planned."""
    conns = resolver(kafka_default=json.dumps({"conn_type": "kafka", "extra": extra}))
    with pytest.raises(ConfigError, match=f"pipeline 'orders': connection 'kafka_default': {message}"):
        connections.kafka_properties(conns, "kafka_default", "orders")


def test_kafka_servers_with_ports_pass_ipv6_included():
    conns = resolver(kafka_default=json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": "a.example:9092,[::1]:9093 , 10.0.0.1:9094", "security.protocol": "sasl_ssl"}}))
    assert connections.kafka_properties(conns, "kafka_default")["bootstrap.servers"].startswith("a.example:9092")


@pytest.mark.parametrize(("value", "message"), [
    ('{"conn_type": "kafka", "extra": "{bootstrap"}', "AIRFLOW_CONN_K: its extra is not valid JSON"),
    ('{"conn_type": "kafka", "extra": [1]}', "AIRFLOW_CONN_K: its extra must be an object of settings.*not a list"),
    ("kafka://h:9092?__extra__=%7Bnope", "AIRFLOW_CONN_K: its __extra__ is not valid JSON"),
    ("kafka://user@h:abc", "AIRFLOW_CONN_K: the port in 'h:abc' is not a number"),
])
def test_a_malformed_connection_variable_names_the_variable_and_the_part(value, message):
    with pytest.raises(ConfigError, match=f"pipeline 'orders': {message}"):
        parse_connection("k", value, "orders")
