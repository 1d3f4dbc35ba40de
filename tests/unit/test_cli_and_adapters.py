from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.errors import KafkaUnavailableError
from tidemark.kafka_client import client_kwargs
from tidemark.settings import resolve_table_uri
from tidemark_cli.main import build_parser


def test_cli_parses_the_contract_commands():
    parser = build_parser()
    args = parser.parse_args(["offsets", "show", "orders", "--json"])
    assert (args.command, args.action, args.pipeline, args.json) == ("offsets", "show", "orders", True)
    args = parser.parse_args(["pipelines", "list"])
    assert (args.command, args.action) == ("pipelines", "list")
    args = parser.parse_args(["lag", "orders"])
    assert (args.command, args.pipeline) == ("lag", "orders")


def test_cli_rejects_a_missing_pipeline_argument(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["offsets", "show"])
    assert exit_info.value.code == 2
    assert "pipeline" in capsys.readouterr().err


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


def test_table_locations_resolve_under_the_lake_root():
    assert resolve_table_uri("orders", "/data/lake") == "/data/lake/orders"
    assert resolve_table_uri("orders", "s3a://b/lake/") == "s3a://b/lake/orders"
    assert resolve_table_uri("/abs/t", "/data/lake") == "/abs/t"
    assert resolve_table_uri("file:///x/t", "/data/lake") == "file:///x/t"


def test_reset_flags_map_to_a_request(tmp_path):
    from tidemark_cli.main import reset_request

    parser = build_parser()
    args = parser.parse_args(["offsets", "reset", "orders", "--shift-by", "-10", "--topic", "orders:0,1",
                              "--topic", "refunds", "--execute", "--reason", "replay after bug 42"])
    request = reset_request(args, "cli:me@host")
    assert (request.scenario, request.shift, request.scopes) == ("shift-by", -10, ("orders:0,1", "refunds"))
    assert (request.execute, request.reason, request.actor) == (True, "replay after bug 42", "cli:me@host")
    assert reset_request(parser.parse_args(["offsets", "reset", "o", "--to-earliest"]), "a").scenario == "to-earliest"
    csv = tmp_path / "offsets.csv"
    csv.write_text("orders,0,5\n")
    request = reset_request(parser.parse_args(["offsets", "reset", "o", "--from-file", str(csv)]), "a")
    assert (request.scenario, request.offsets_file, request.execute) == ("from-file", "orders,0,5\n", False)


def test_reset_needs_exactly_one_scenario(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["offsets", "reset", "o", "--to-earliest", "--to-latest"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["offsets", "reset", "o"])
    assert "one of the arguments" in capsys.readouterr().err


def test_spark_jobs_log_the_kafka_client_at_warn_unless_the_caller_has_a_spark_conf_dir(monkeypatch, tmp_path):
    from tidemark_spark.submit import SPARK_CONF_DIR, local_spark_env

    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    assert local_spark_env()["SPARK_CONF_DIR"] == SPARK_CONF_DIR
    lines = (Path(SPARK_CONF_DIR) / "log4j2.properties").read_text().splitlines()
    assert "logger.kafka.name = org.apache.kafka" in lines and "logger.kafka.level = warn" in lines
    assert "rootLogger.level = info" in lines  # Spark's own progress stays
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert local_spark_env()["SPARK_CONF_DIR"] == str(tmp_path)
