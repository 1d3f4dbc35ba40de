"""Kafka over TLS on the three-broker cluster (scripts/kafka_cluster.sh): for SSL, mutual TLS and
SASL_SSL (SCRAM-SHA-512), the plan (kafka-python) sees the topic's offsets and Spark's Kafka source reads
exactly the frozen range with the same connection, its CA, certificate and key reaching Spark as PEM text
(no file on an executor). A bad CA, a wrong host name, a missing or expired client certificate and a
wrong SCRAM password each fail as a terminal error that names the listener and the cause, with nothing
written, at the first refused login or handshake: the brokers' logs count one per plan attempt."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests import helpers
from tidemark import settings
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.spark import batch_io
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import ConfigError, KafkaAuthenticationError, is_transient
from tidemark.kafka.tls import handshake_failure
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

CASES = [("ssl", True), ("mtls", False), ("mtls", True), ("sasl_ssl", False)]


def _pipeline(topic: str):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, "kafka_timeout_seconds": 10}, "test")


@pytest.mark.parametrize(("kind", "inline"), CASES, ids=[f"{k}-{'inline' if i else 'paths'}" for k, i in CASES])
def test_plan_and_spark_read_over_tls(kind, inline, kafka_cluster, spark, lake):
    topic = kafka_cluster.create_topic(helpers.unique(f"tls_{kind}"), partitions=3)
    produced = kafka_cluster.produce(topic, 30)
    props = kafka_cluster.connection(kind, inline)

    plan = prepare_batch(_pipeline(topic), props)
    assert sorted((r.tp.partition, r.start, r.end) for r in plan.ranges) == [(0, 0, 10), (1, 0, 10), (2, 0, 10)]

    options = batch_io.kafka_source_options(plan, props)
    assert options["kafka.bootstrap.servers"] == kafka_cluster.bootstrap(kind)
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.certificates"].strip() == kafka_cluster.text("ca").strip()
    assert options["kafka.ssl.endpoint.identification.algorithm"] == "https"
    assert not [k for k in options if k.endswith(("location", "file"))]  # no path an executor would need
    if kind == "mtls":
        assert options["kafka.ssl.keystore.type"] == "PEM"
        assert options["kafka.ssl.keystore.key"].strip() == kafka_cluster.text("client_key").strip()
    rows = batch_io.read_ranges(spark, options).select("partition", "offset", "value").collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(produced)
    assert len({(r.partition, r.offset) for r in rows}) == 30


def _bad_connections(cluster) -> dict[str, tuple[dict[str, str], str]]:
    """Each bad case: its connection and the words of the cause its error must hold."""
    untrusted = {**cluster.connection("ssl", inline=False), "ssl.cafile": cluster.pem("untrusted_ca")}
    wrong_name = {**cluster.connection("ssl", inline=False), "bootstrap.servers": cluster.bootstrap("wrong_name")}
    no_client_certificate = cluster.connection("ssl", inline=False) | {"bootstrap.servers": cluster.bootstrap("mtls")}
    expired = {**cluster.connection("mtls", inline=False), "ssl.certfile": cluster.pem("expired_cert"),
               "ssl.keyfile": cluster.pem("expired_key")}
    wrong_password = {**cluster.connection("sasl_ssl", inline=False), "sasl.password": "not-the-password"}
    return {
        "untrusted-ca": (untrusted, "the broker's certificate is not trusted"),
        "wrong-hostname": (wrong_name, "the broker's certificate does not hold the name it was reached by"),
        "no-client-certificate": (no_client_certificate, "this listener requires a client certificate"),
        "expired-client-certificate": (expired, "(CN=tidemark-expired-client, in ssl.certfile) expired on 2020-01-02"),
        "wrong-scram-password": (wrong_password, "invalid credentials with SASL mechanism SCRAM-SHA-512"),
    }


_FAILED_AUTHENTICATION = re.compile(r"Failed authentication with \S+ \(channelId=127\.0\.0\.1:(\d+)-")


def _failed_authentications(cluster, ports: set[str]) -> list[str]:
    """The lines in which the brokers logged a refused login or a failed TLS handshake on these listener ports:
    org.apache.kafka.common.network.Selector logs each at INFO (config/kafka-log4j2.yaml), once per connection.
    Only this module fails logins on the cluster, and pytest-xdist keeps a module on one worker."""
    home = Path(cluster.pem("ca")).parents[1]  # KAFKA_CLUSTER_HOME: the CA is in its tls/
    lines = []
    for log in sorted(home.glob("broker-*/logs/server.log*")):  # with any rolled-over file
        lines += [line for line in log.read_text(errors="replace").splitlines()
                  if (found := _FAILED_AUTHENTICATION.search(line)) and found.group(1) in ports]
    return lines


ATTEMPTS = 5  # plan attempts per bad connection: one more refused login in any of them shows


@pytest.mark.parametrize("case", ["untrusted-ca", "wrong-hostname", "no-client-certificate",
                                  "expired-client-certificate", "wrong-scram-password"])
def test_a_bad_certificate_or_password_is_a_terminal_error_naming_the_listener(case, kafka_cluster, lake):
    """Each plan attempt ends at the first refusal, with kafka-python's client closed before it reconnects: the
    brokers log exactly one failed authentication per attempt (none for the expired certificate, refused before
    any connection). kafka-python alone logged in again until its timeout: 3 to 22 refused logins per attempt
    with the wrong password."""
    topic = kafka_cluster.create_topic(helpers.unique("tls_bad"), partitions=1)
    kafka_cluster.produce(topic, 3)
    props, cause = _bad_connections(kafka_cluster)[case]
    ports = {server.rsplit(":", 1)[1] for server in props["bootstrap.servers"].split(",")}
    before = set(_failed_authentications(kafka_cluster, ports))  # each line names its connection: unique

    def refused() -> list[str]:
        return [line for line in _failed_authentications(kafka_cluster, ports) if line not in before]

    for _ in range(ATTEMPTS):
        with pytest.raises((KafkaAuthenticationError, ConfigError)) as err:
            prepare_batch(_pipeline(topic), props)
        message = str(err.value)
        assert message.startswith(f"pipeline '{topic}': ")
        assert props["bootstrap.servers"] in message and cause in message
        assert "Nothing was read or committed" in message
        assert not is_transient(err.value)
        if case == "wrong-scram-password":
            assert "not-the-password" not in message
    assert Ledger(settings.ledger_uri()).version() == -1  # nothing written, not even the ledger

    expected = 0 if case == "expired-client-certificate" else ATTEMPTS
    helpers.wait_until(lambda: len(refused()) >= expected, 10, f"the brokers to log {expected} failed authentications")
    time.sleep(0.5)  # a login after the failure (a client not closed) would show within this
    # At the first refusal, not after kafka_timeout_seconds: a client that went on logging in would show here
    # (the count, not the clock: a busy machine slows a prompt failure too).
    assert len(refused()) == expected, "\n".join(refused())


@pytest.mark.parametrize("case", ["untrusted-ca", "wrong-hostname", "no-client-certificate"])
def test_spark_reports_the_same_tls_failure(case, kafka_cluster, spark, lake):
    """Spark's Kafka source (the Java client) refuses the same bad connections; its error, read by
    ``handshake_failure``, gives the same cause as the plan's."""
    topic = kafka_cluster.create_topic(helpers.unique("tls_spark_bad"), partitions=1)
    kafka_cluster.produce(topic, 3)
    good = kafka_cluster.connection("ssl", inline=False)
    plan = prepare_batch(_pipeline(topic), good)
    props, cause = _bad_connections(kafka_cluster)[case]

    with pytest.raises(Exception) as err:
        batch_io.read_ranges(spark, batch_io.kafka_source_options(plan, props)).collect()
    described = handshake_failure(str(err.value))
    assert described is not None and cause in described, str(err.value)[:3000]
