"""Kafka client properties (tidemark.kafka.client): the two credential spellings a connection may use, the
kafka-python translation, which values count as secrets, and that none of them reaches an error message."""

from __future__ import annotations

import ssl

import pytest

from tidemark.errors import ConfigError, KafkaAuthenticationError, KafkaUnavailableError, is_transient
from tidemark.kafka.client import client_kwargs, java_client_properties, refusal_error, secret_values

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


def test_secret_values_are_the_credentials_and_nothing_else():
    props = {"bootstrap.servers": "h:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.jaas.config": f'{SCRAM} required username="alice" password="s3cret-value";',
             "ssl.key.password": "key-pass", "ssl.cafile": "/ca.pem"}
    assert secret_values(props) == [props["sasl.jaas.config"], "s3cret-value", "key-pass"]
    assert secret_values({"bootstrap.servers": "h:9092"}) == []
    assert "p4ssword" in secret_values({"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p4ssword"})


def test_each_refusal_is_a_terminal_error_that_says_what_to_fix_and_hides_the_password():
    from kafka import errors

    props = {"bootstrap.servers": "h:9096", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
             "sasl.username": "alice", "sasl.password": "hunter2-secret"}
    refused = errors.SaslAuthenticationFailedError("SaslAuthenticationFailedError: Authentication failed during "
                                                   "authentication due to invalid credentials with SASL mechanism "
                                                   "SCRAM-SHA-256")
    cases = [
        (refused, "Kafka at h:9096 refused the credentials of the Kafka connection (SASL authentication failed: "
                 "Authentication failed during authentication due to invalid credentials with SASL mechanism "
                 "SCRAM-SHA-256)"),
        (errors.UnsupportedSaslMechanismError(), "does not offer the Kafka connection's sasl.mechanism SCRAM-SHA-256 "
                                                 "on this listener"),
        (errors.IllegalSaslStateError(), "did not expect a SASL login"),
        (ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed "
                                         "certificate in certificate chain"),
         "the broker's certificate is not trusted"),
    ]
    for refusal, said in cases:
        error = refusal_error(props, "h:9096", refusal, pipeline="p")
        assert isinstance(error, KafkaAuthenticationError) and not is_transient(error)
        assert said in str(error) and "Nothing was read or committed." in str(error), str(error)
        assert "hunter2-secret" not in str(error)


def test_kafka_properties_translate_to_kafka_python_with_sasl_credentials():
    kwargs = client_kwargs({
        "bootstrap.servers": "h1:9092, h2:9092",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="alice" password="s3cret";',
        "request.timeout.ms": "5000",
        "reconnect.backoff.max.ms": "2000",
    })
    assert kwargs == {"bootstrap_servers": ["h1:9092", "h2:9092"], "security_protocol": "SASL_PLAINTEXT",
                      "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
                      "sasl_plain_password": "s3cret", "request_timeout_ms": 5000, "reconnect_backoff_max_ms": 2000}


def test_kafka_properties_need_bootstrap_servers():
    with pytest.raises(KafkaUnavailableError, match="bootstrap.servers"):
        client_kwargs({"security.protocol": "PLAINTEXT"})


def test_a_metadata_request_to_a_broker_that_died_is_tried_again_then_named_unavailable():
    """A broker lost after the bootstrap may be the one kafka-python asks for metadata: a connection error
    (seen in CI on the three-broker cluster), tried again within the timeout, else a transient error."""
    import pytest
    from kafka.errors import KafkaConnectionError

    from tidemark.errors import KafkaUnavailableError
    from tidemark.kafka.client import KafkaOffsets

    class Consumer:
        def __init__(self, failures: int) -> None:
            self.failures = failures

        def topics(self):
            if self.failures:
                self.failures -= 1
                raise KafkaConnectionError("111 ECONNREFUSED")
            return {"orders"}

    offsets = object.__new__(KafkaOffsets)  # no connection: the consumer is the stand-in above
    offsets._pipeline, offsets._timeout_ms, offsets._consumer = "p", 2000, Consumer(failures=2)
    assert offsets.topic_names() == {"orders"}
    offsets._timeout_ms, offsets._consumer = 0, Consumer(failures=1)
    with pytest.raises(KafkaUnavailableError, match="pipeline 'p': Kafka did not return the cluster's metadata"):
        offsets.topic_names()


@pytest.mark.parametrize("jaas", [
    "org.apache.kafka.common.security.scram.ScramLoginModule required username=etl password=s3cret;",
    "org.apache.kafka.common.security.scram.ScramLoginModule required username='etl' password='s3cret';",
])
def test_a_jaas_config_whose_credentials_kafka_python_cannot_read_is_refused_without_showing_them(jaas):
    """Unquoted or single-quoted values used to give kafka-python no username or password at all: the broker
    then refused the login with nothing in the message to say why."""
    properties = {"bootstrap.servers": "h:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                  "sasl.jaas.config": jaas}
    with pytest.raises(ConfigError, match=r'sasl.jaas.config has no username="..." and password="..." for '
                                          r"SCRAM-SHA-512 \(each value in double quotes") as refused:
        client_kwargs(properties)
    assert "s3cret" not in str(refused.value)


def test_a_timeout_that_is_not_a_number_names_the_setting():
    with pytest.raises(ConfigError, match="request.timeout.ms is '30s', not a whole number"):
        client_kwargs({"bootstrap.servers": "h:9092", "request.timeout.ms": "30s"})
