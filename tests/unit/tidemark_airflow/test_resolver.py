"""Airflow connections (tidemark_airflow.resolver): Kafka credentials reach Airflow's secrets masker."""

from __future__ import annotations

import json

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_the_connection_registers_its_credentials_with_airflows_secrets_masker(monkeypatch):
    from airflow.sdk.log import redact

    from tidemark.connections import kafka_properties
    from tidemark_airflow.resolver import RESOLVER

    jaas = f'{SCRAM} required username="alice" password="canary-7f3a9c";'
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_MASKED", json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": "h:9094", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": jaas}}))
    assert kafka_properties(RESOLVER, "kafka_masked")["sasl.jaas.config"] == jaas
    assert "canary-7f3a9c" not in redact(f"a line with canary-7f3a9c and {jaas}")
