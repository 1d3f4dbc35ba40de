"""The command line (tidemark_cli.main): its parser and the reset flags."""

from __future__ import annotations

import pytest

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


def test_reset_flags_map_to_a_request(tmp_path):
    from tidemark_cli.main import reset_request

    parser = build_parser()
    args = parser.parse_args(["offsets", "reset", "orders", "--shift-by", "-10", "--topic", "orders:0,1",
                              "--topic", "refunds", "--execute", "--reason", "replay after bug 42"])
    request = reset_request(args, "cli:me@host")
    assert (request.scenario, request.shift, request.scopes) == ("shift-by", -10, ("orders:0,1", "refunds"))
    assert (request.execute, request.reason, request.owner) == (True, "replay after bug 42", "cli:me@host")
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


def test_pipelines_list_lists_the_valid_files_and_exits_3_naming_a_broken_one(tmp_path, monkeypatch, capsys):
    import shutil
    from pathlib import Path

    from tidemark_cli.main import main

    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "pipelines"
    shutil.copy(fixtures / "good" / "orders.yaml", tmp_path / "orders.yaml")
    shutil.copy(fixtures / "broken" / "bad_isolation.yaml", tmp_path / "bad_isolation.yaml")
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(tmp_path))
    assert main(["pipelines", "list"]) == 3
    out, err = capsys.readouterr()
    assert "orders" in out and "broken:" in err and "bad_isolation.yaml" in err
    (tmp_path / "bad_isolation.yaml").unlink()
    assert main(["pipelines", "list"]) == 0


@pytest.mark.parametrize("debug", ["", "1"])
def test_kafka_pythons_own_log_lines_reach_the_cli_only_with_tidemark_kafka_debug(monkeypatch, debug):
    import logging

    from tidemark_cli.main import _logs_to_stderr

    kafka = logging.getLogger("kafka")
    monkeypatch.setattr(kafka, "propagate", True)
    monkeypatch.setenv("TIDEMARK_KAFKA_DEBUG", debug)
    _logs_to_stderr()
    assert kafka.propagate is bool(debug)


def test_a_keyed_tables_differing_sampled_keys_are_listed_and_exit_4(monkeypatch, capsys):
    from tidemark.audit.live_table import AuditReport
    from tidemark_cli import main as cli

    sample = {"requested": 5, "verified": 5, "not_retained": 0, "values_compared": True, "keys_read": 9, "mismatches": [
        {"key": {"id": 3}, "topic": "t", "partition": 0, "offset": 7, "change": "delete", "table_rows": 1,
         "columns": [], "reason": "row present but deleted"}]}
    report = AuditReport("p", "/lake/t", 2, 4, [], 0, [], [], 0, sample=sample, keys=["id"])
    monkeypatch.setattr(cli, "open_run", lambda name: type("Run", (), {"audit": lambda self, **kw: report})())
    assert cli.main(["audit", "p", "--verify-sample", "5"]) == 4
    shown = capsys.readouterr().out
    assert "sampled keys that differ from their newest change in Kafka:" in shown
    assert '{"id": 3}  t      0          7       delete  1           row present but deleted' in shown
    assert "sampled ranges that differ" not in shown and "5 sampled keys (of 9 with a change" in shown


@pytest.mark.parametrize("debug", ["", "0", "1"])
def test_kafka_pythons_log_lines_are_summed_up_when_the_connection_comes_from_the_environment(
        tmp_path, monkeypatch, caplog, debug):
    """``AIRFLOW_CONN_KAFKA_DEFAULT`` (no Airflow lookup): kafka-python's lines reach the CLI only with
    TIDEMARK_KAFKA_DEBUG=1, as on the Airflow route."""
    import logging

    from tidemark_cli.connection_commands import open_run

    (tmp_path / "orders.yaml").write_text("name: orders\ntopics: [orders]\ntable: orders\n")
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(tmp_path))
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path / "lake"))
    monkeypatch.delenv("TIDEMARK_LEDGER_URI", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT",
                       '{"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:1"}}')
    monkeypatch.setenv("TIDEMARK_KAFKA_DEBUG", debug)
    monkeypatch.setattr(logging.getLogger("kafka"), "propagate", True)
    assert open_run("orders").kafka_properties["bootstrap.servers"] == "127.0.0.1:1"
    logging.getLogger("kafka.net.connection").error("Connection lost: KafkaConnectionError: 111 ECONNREFUSED")
    assert [r.name for r in caplog.records] == (["kafka.net.connection"] if debug == "1" else [])


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--to-datetime", "soon", "'soon' is not an ISO-8601 date-time (for example 2026-11-01T08:00:00Z)"),
    ("--to-datetime", "2026-13-01T08:00:00Z", "'2026-13-01T08:00:00Z' is not an ISO-8601 date-time"),
    ("--by-duration", "2h", "'2h' is not an ISO-8601 duration (for example PT30M, PT2H, P1D): for 2h write PT2H"),
    ("--by-duration", "30 M", "'30 M' is not an ISO-8601 duration (for example PT30M, PT2H, P1D): for 30m write PT30M"),
    ("--by-duration", "soon", "'soon' is not an ISO-8601 duration (for example PT30M, PT2H, P1D)"),
])
def test_a_bad_reset_time_exits_2_naming_the_flag_before_anything_is_read(monkeypatch, capsys, flag, value, message):
    from tidemark_cli import main as cli

    monkeypatch.setattr(cli, "open_run", lambda name: pytest.fail("the pipeline was opened"))
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", "/nonexistent/pipelines")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["offsets", "reset", "orders", flag, value, "--execute", "--reason", "replay"])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"tidemark offsets reset: error: argument {flag}: {message}")


def test_reset_times_in_iso_8601_reach_the_request_as_given():
    from tidemark_cli.main import reset_request

    parser = build_parser()
    request = reset_request(parser.parse_args(["offsets", "reset", "o", "--to-datetime", "2026-11-01T08:00:00Z"]), "a")
    assert (request.scenario, request.datetime) == ("to-datetime", "2026-11-01T08:00:00Z")
    request = reset_request(parser.parse_args(["offsets", "reset", "o", "--by-duration", "P1DT12H"]), "a")
    assert (request.scenario, request.duration) == ("by-duration", "P1DT12H")
    assert parser.parse_args(["offsets", "reset", "o", "--to-datetime", "2026-11-01"]).to_datetime == "2026-11-01"


@pytest.mark.parametrize("value", ["-1", "two", "1.5", ""])
def test_audit_verify_sample_takes_a_whole_number_of_0_or_more(monkeypatch, capsys, value):
    from tidemark_cli import main as cli

    monkeypatch.setattr(cli, "open_run", lambda name: pytest.fail("the pipeline was opened"))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["audit", "orders", "--verify-sample", value])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"tidemark audit: error: argument --verify-sample: '{value}' is not a whole number >= 0 (the committed "
        f"ranges, or keys of a keyed table, to compare with Kafka; 0, the default, compares none)")
    parser = build_parser()
    assert [parser.parse_args(["audit", "o", *more]).verify_sample for more in
            ([], ["--verify-sample", "0"], ["--verify-sample", "3"])] == [0, 0, 3]


@pytest.mark.parametrize("value", ["-1", "0", "ten"])
def test_offsets_history_limit_takes_a_whole_number_of_1_or_more(monkeypatch, capsys, value):
    from tidemark_cli import main as cli

    monkeypatch.setattr(cli, "open_run", lambda name: pytest.fail("the pipeline was opened"))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["offsets", "history", "orders", "--limit", value])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"tidemark offsets history: error: argument --limit: '{value}' is not a whole number >= 1 (the rows to show)")
    assert build_parser().parse_args(["offsets", "history", "o", "--limit", "7"]).limit == 7
