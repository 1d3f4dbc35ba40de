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


def test_airflow_processes_read_the_pipelines_beside_the_dags_not_in_their_working_directory(
        tmp_path, monkeypatch):
    """The DAG file reads the pipelines folder beside it; a task's process, the operator and the page
    must read the same one whatever their working directory: ``TIDEMARK_PIPELINES_DIR``, else
    ``pipelines`` in Airflow's DAGs folder."""
    import shutil
    from pathlib import Path
    from types import SimpleNamespace

    from tidemark_airflow.resolver import open_run, pipelines_folder, run_for_plan

    dags = tmp_path / "dags"
    (dags / "pipelines").mkdir(parents=True)
    shutil.copy(Path(__file__).resolve().parents[2] / "fixtures" / "pipelines" / "good" / "orders.yaml",
                dags / "pipelines")
    elsewhere = tmp_path / "worker-cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("TIDEMARK_PIPELINES_DIR", raising=False)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path / "lake"))
    assert pipelines_folder() == dags / "pipelines"
    assert open_run("orders").name == "orders"
    config = open_run("orders").config
    plan = SimpleNamespace(pipeline="orders", table_uri=config.table_uri, dead_letter_uri=config.dead_letter_uri,
                           ledger_uri=str(tmp_path / "lake" / "_tidemark" / "offsets"))  # what for_plan reads
    assert run_for_plan(plan).name == "orders"
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(elsewhere))  # the variable still wins
    assert pipelines_folder() == elsewhere
