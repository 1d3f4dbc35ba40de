"""A Kafka connection's TLS settings (tidemark.kafka.tls) without a broker: the same CA, certificate and
key, given as PEM text or as paths, become Kafka's PEM properties for Spark and one SSLContext for
kafka-python; the key counts as a secret; bad material fails before any connection, saying which property.
The handshake failures' texts are those seen on the cluster (tests/integration/test_kafka_tls.py)."""

from __future__ import annotations

import datetime as dt
import os
import re
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tidemark.batch.plan import BatchPlan
from tidemark.batch.spark.batch_io import SECRET_OPTIONS, kafka_source_options
from tidemark.errors import ConfigError
from tidemark.kafka.client import client_kwargs, java_client_properties, secret_values
from tidemark.kafka.offsets import OffsetRange
from tidemark.kafka.tls import handshake_failure, java_tls_properties, ssl_context


def _certificate(name: str, key, issuer_key, issuer: str, days: tuple[int, int] = (-1, 30), ca: bool = False) -> str:
    now = dt.datetime.now(dt.UTC)
    certificate = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now + dt.timedelta(days=days[0])).not_valid_after(now + dt.timedelta(days=days[1]))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                   .sign(issuer_key, hashes.SHA256()))
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key, form=serialization.PrivateFormat.PKCS8) -> str:
    return key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption()).decode()


@pytest.fixture(scope="module")
def pem() -> dict[str, str]:
    ca_key, client_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    return {"ca": _certificate("test CA", ca_key, ca_key, "test CA", ca=True),
            "cert": _certificate("client", client_key, ca_key, "test CA"),
            "key": _key_pem(client_key),
            "sec1_key": _key_pem(client_key, serialization.PrivateFormat.TraditionalOpenSSL),
            "expired": _certificate("old-client", client_key, ca_key, "test CA", days=(-30, -2))}


@pytest.fixture
def files(pem, tmp_path) -> dict[str, str]:
    paths = {}
    for name, text in pem.items():
        (tmp_path / f"{name}.pem").write_text(text)
        paths[name] = str(tmp_path / f"{name}.pem")
    return paths


def _ssl(**extra: str) -> dict[str, str]:
    return {"bootstrap.servers": "127.0.0.1:9093", "security.protocol": "SSL", **extra}


def test_paths_become_the_same_pem_text_for_spark_as_inline_pem(pem, files):
    by_path = java_client_properties(_ssl(**{"ssl.cafile": files["ca"], "ssl.certfile": files["cert"],
                                             "ssl.keyfile": files["key"]}))
    inline = java_client_properties(_ssl(**{"ssl.truststore.type": "PEM", "ssl.truststore.certificates": pem["ca"],
                                            "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": pem["cert"],
                                            "ssl.keystore.key": pem["key"]}))
    assert by_path == inline
    assert by_path == {"bootstrap.servers": "127.0.0.1:9093", "security.protocol": "SSL",
                       "ssl.truststore.type": "PEM", "ssl.truststore.certificates": pem["ca"],
                       "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": pem["cert"],
                       "ssl.keystore.key": pem["key"], "ssl.endpoint.identification.algorithm": "https"}


def test_a_pem_keystore_file_holds_key_and_chain_and_an_encrypted_keys_password_is_kept(pem, tmp_path):
    store = tmp_path / "store.pem"
    store.write_text(pem["key"] + pem["cert"])
    props = java_tls_properties(_ssl(**{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(store),
                                        "ssl.password": "key-pass-123"}))
    assert (props["ssl.keystore.key"], props["ssl.keystore.certificate.chain"]) == (pem["key"], pem["cert"])
    assert "ssl.keystore.location" not in props and props["ssl.key.password"] == "key-pass-123"
    assert "ssl.password" not in props


def test_spark_redacts_the_key_and_credentials_in_plan_descriptions_and_shows_what_the_read_needs(pem):
    # Spark redacts a reader option whose name or value matches spark.sql.redaction.options.regex, and its
    # DataSource V2 scan prints every option in the plan (these patterns read the same in Java and Python)
    plan = BatchPlan("p", 1, "/t", "/l", [OffsetRange("orders", 0, 0, 5)])
    options = kafka_source_options(plan, _ssl(**{
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
        "sasl.password": "s3cret", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": pem["ca"],
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": pem["cert"], "ssl.keystore.key": pem["key"],
        "ssl.key.password": "k3y-pass"}))
    redacted = {k for k, v in options.items() if re.search(SECRET_OPTIONS, k) or re.search(SECRET_OPTIONS, v)}
    assert redacted == {"kafka.sasl.jaas.config", "kafka.ssl.truststore.type", "kafka.ssl.truststore.certificates",
                        "kafka.ssl.keystore.type", "kafka.ssl.keystore.certificate.chain", "kafka.ssl.keystore.key",
                        "kafka.ssl.key.password"}
    connect = (Path(__file__).resolve().parents[3] / "scripts" / "connect.sh").read_text()
    assert f'"spark.sql.redaction.options.regex={SECRET_OPTIONS}"' in connect  # the warm server's own setting


def test_hostname_verification_is_on_unless_switched_off_with_kafkas_empty_algorithm(files):
    assert java_tls_properties(_ssl())["ssl.endpoint.identification.algorithm"] == "https"
    assert java_tls_properties(_ssl(**{"ssl.endpoint.identification.algorithm": ""}))[
        "ssl.endpoint.identification.algorithm"] == ""
    assert java_tls_properties(_ssl(**{"ssl.check.hostname": "false"}))["ssl.endpoint.identification.algorithm"] == ""
    assert ssl_context(_ssl(**{"ssl.cafile": files["ca"]})).check_hostname is True
    context = ssl_context(_ssl(**{"ssl.cafile": files["ca"], "ssl.endpoint.identification.algorithm": ""}))
    assert context.check_hostname is False and context.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ConfigError, match="'http'; Kafka knows 'https'"):
        java_tls_properties(_ssl(**{"ssl.endpoint.identification.algorithm": "http"}))


def test_kafka_python_gets_one_context_and_the_key_file_it_loaded_from_is_gone(pem, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    kwargs = client_kwargs(_ssl(**{"ssl.truststore.certificates": pem["ca"], "ssl.keystore.certificate.chain":
                                   pem["cert"], "ssl.keystore.key": pem["key"], "ssl.check.hostname": "true"}))
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert not [k for k in kwargs if k.startswith("ssl_") and k != "ssl_context"]
    assert kwargs["ssl_context"].cert_store_stats()["x509_ca"] == 1
    assert os.listdir(tmp_path) == []


def test_the_client_key_is_a_secret_inline_or_from_its_file_and_certificates_are_not(pem, files):
    inline = secret_values(_ssl(**{"ssl.keystore.certificate.chain": pem["cert"], "ssl.keystore.key": pem["key"]}))
    by_path = secret_values(_ssl(**{"ssl.certfile": files["cert"], "ssl.keyfile": files["key"]}))
    body = [line for line in pem["key"].splitlines() if "-----" not in line]
    for found in (inline, by_path):
        assert pem["key"] in found or pem["key"].strip() in found
        assert all(line in found for line in body if len(line) >= 16)
        assert not any(pem["cert"].splitlines()[1] in value for value in found)
    assert secret_values(_ssl(**{"ssl.certfile": "/nowhere/cert.pem", "ssl.keyfile": "/nowhere/key.pem"})) == []


def test_bad_material_fails_before_any_connection_naming_the_property(pem, files):
    with pytest.raises(ConfigError, match=r"ssl.cafile '/nowhere/ca.pem' cannot be read \(No such file"):
        client_kwargs(_ssl(**{"ssl.cafile": "/nowhere/ca.pem"}))
    with pytest.raises(ConfigError, match="ssl.truststore.certificates holds no PEM certificate"):
        java_tls_properties(_ssl(**{"ssl.truststore.certificates": "not a certificate"}))
    with pytest.raises(ConfigError, match=r"ssl.keyfile holds 0 PEM private keys"):
        client_kwargs(_ssl(**{"ssl.certfile": files["cert"], "ssl.keyfile": files["cert"]}))
    with pytest.raises(ConfigError, match=r"\(CN=old-client, in ssl.certfile\) expired on "):
        client_kwargs(_ssl(**{"ssl.certfile": files["expired"], "ssl.keyfile": files["key"]}))
    with pytest.raises(ConfigError, match="not in PKCS#8 form.*openssl pkcs8 -topk8"):
        java_tls_properties(_ssl(**{"ssl.certfile": files["cert"], "ssl.keyfile": files["sec1_key"]}))
    jks = {"ssl.truststore.type": "JKS", "ssl.truststore.location": "/etc/kafka/trust.jks"}
    with pytest.raises(ConfigError, match="a JKS file, which kafka-python"):
        client_kwargs(_ssl(**jks))
    assert java_tls_properties(_ssl(**jks))["ssl.truststore.location"] == "/etc/kafka/trust.jks"  # the Java client's


def test_without_tls_nothing_is_read_and_kafka_pythons_spellings_do_not_reach_java():
    props = {"bootstrap.servers": "h:9092", "security.protocol": "SASL_PLAINTEXT", "ssl.cafile": "/nowhere.pem"}
    assert java_tls_properties(props) == {"bootstrap.servers": "h:9092", "security.protocol": "SASL_PLAINTEXT"}
    assert "ssl_context" not in client_kwargs(props)


@pytest.mark.parametrize(("text", "cause"), [
    ("KafkaConnectionError: Handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed "
     "certificate in certificate chain (_ssl.c:1006)", "the broker's certificate is not trusted (certificate verify "
     "failed: self-signed certificate in certificate chain)"),
    ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: IP address mismatch, certificate is not valid for "
     "'127.0.0.1'. (_ssl.c:1006)", "the broker's certificate does not hold the name it was reached by"),
    ("KafkaConnectionError: [SSL: SSLV3_ALERT_BAD_CERTIFICATE] sslv3 alert bad certificate (_ssl.c:2580)",
     "the broker ended the handshake (sslv3 alert bad certificate): this listener requires a client certificate"),
    ("SslAuthenticationException: SSL handshake failed\nCaused by: javax.net.ssl.SSLHandshakeException: PKIX path "
     "building failed: unable to find valid certification path to requested target",
     "the broker's certificate is not trusted (PKIX path building failed"),
    ("SslAuthenticationException: Failed to process post-handshake messages\nCaused by: javax.net.ssl."
     "SSLHandshakeException: Received fatal alert: bad_certificate", "this listener requires a client certificate"),
])
def test_handshake_failures_say_the_cause_and_what_to_fix(text, cause):
    assert cause in handshake_failure(text)


def test_other_errors_are_not_handshake_failures():
    assert handshake_failure("KafkaTimeoutError: Unable to bootstrap from 127.0.0.1:9092") is None
    assert handshake_failure("[SSL: SSLV3_ALERT_BAD_CERTIFICATE] x", client_certificate=False).endswith(
        "; the connection gives none: give ssl.keystore.certificate.chain and ssl.keystore.key (or ssl.certfile and "
        "ssl.keyfile)")
