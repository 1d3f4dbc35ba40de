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
    from tidemark.audit import AuditReport
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
