"""How a command ends on an error Tidemark does not know (tidemark_cli.exits): exit 70, one line that says
where the trace is, and the trace itself with --debug (before or after the command's words) or TIDEMARK_DEBUG=1."""

from __future__ import annotations

import tempfile

import pytest

from tidemark.errors import ConfigError
from tidemark_cli import main as cli
from tidemark_cli.exits import EXIT_JOB_FAILED, EXIT_REFUSED, EXIT_UNEXPECTED


def _open_raising(error: Exception):
    def open_run(name: str):
        raise error
    return open_run


@pytest.fixture
def traces(tmp_path, monkeypatch):
    """Where the traces go (the temporary folder), with no TIDEMARK_DEBUG from the caller's shell."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("TIDEMARK_DEBUG", raising=False)
    return tmp_path


def test_an_unexpected_error_exits_70_with_one_line_that_names_the_file_holding_its_trace(traces, monkeypatch,
                                                                                         capsys):
    monkeypatch.setattr(cli, "open_run", _open_raising(KeyError("partition_count")))
    assert cli.main(["lag", "orders"]) == EXIT_UNEXPECTED == 70
    assert EXIT_UNEXPECTED not in (EXIT_JOB_FAILED, EXIT_REFUSED)
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    [saved] = traces.glob("tidemark-error-*.txt")
    assert err == (f"tidemark: unexpected error: KeyError: 'partition_count'; the full trace is in {saved} "
                   f"(--debug or TIDEMARK_DEBUG=1 prints it)\n")
    trace = saved.read_text()
    assert trace.startswith("Traceback") and "in cmd_lag" in trace and "KeyError: 'partition_count'" in trace


@pytest.mark.parametrize(("argv", "variable"), [
    (["--debug", "lag", "orders"], ""),
    (["lag", "orders", "--debug"], ""),
    (["lag", "orders"], "1"),
])
def test_debug_or_tidemark_debug_prints_the_trace_instead(traces, monkeypatch, capsys, argv, variable):
    monkeypatch.setattr(cli, "open_run", _open_raising(RuntimeError("the broker said something new\nsecond line")))
    monkeypatch.setenv("TIDEMARK_DEBUG", variable)
    assert cli.main(argv) == EXIT_UNEXPECTED
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "in cmd_lag" in err
    assert err.endswith("tidemark: unexpected error: RuntimeError: the broker said something new (exit 70; the "
                        "trace is above)\n")
    assert list(traces.glob("tidemark-error-*")) == []


def test_a_tidemark_error_stays_a_refusal_with_its_own_message(traces, monkeypatch, capsys):
    monkeypatch.setattr(cli, "open_run", _open_raising(ConfigError("no pipeline 'orders'")))
    assert cli.main(["--debug", "lag", "orders"]) == EXIT_REFUSED
    assert capsys.readouterr().err == "tidemark: error: no pipeline 'orders'\n"


def test_every_command_takes_debug():
    parser = cli.build_parser()
    assert parser.parse_args(["offsets", "show", "o"]).debug is False
    assert parser.parse_args(["--debug", "offsets", "show", "o"]).debug is True
    assert parser.parse_args(["dead-letters", "reprocess", "o", "--all", "--reason", "r", "--debug"]).debug is True
    assert parser.parse_args(["audit", "o", "--debug"]).debug is True
