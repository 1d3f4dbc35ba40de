from __future__ import annotations

import os
import socket
import time

import pytest

from tidemark import crash
from tidemark.batch.ownership import cli_owner_id, is_owner_alive


def test_cli_owner_is_alive_while_its_process_is():
    assert is_owner_alive(cli_owner_id())
    assert not is_owner_alive(f"cli:{socket.gethostname()}:{2**22 + 12345}:0")


def test_a_cli_owner_whose_pid_now_belongs_to_a_newer_process_is_gone():
    """pids are reused: a live process that started after the owner id was made is not the owner."""
    host = socket.gethostname()
    assert is_owner_alive(f"cli:{host}:{os.getpid()}:{int(time.time())}")
    assert not is_owner_alive(f"cli:{host}:{os.getpid()}:1000000000")  # 2001: this process is younger


def test_cli_owner_on_another_host_is_assumed_alive():
    assert is_owner_alive("cli:some-other-host:1:0")


@pytest.mark.parametrize(("state", "alive"), [("running", True), ("queued", True), ("failed", False),
                                              ("success", False)])
def test_airflow_owner_liveness_follows_the_dag_run_state(state, alive):
    assert is_owner_alive("manual__x", lambda run_id: state) is alive


def test_airflow_owner_is_assumed_alive_without_a_lookup_and_dead_when_unknown():
    assert is_owner_alive("manual__x")

    def missing(run_id):
        raise LookupError("no such run")

    assert not is_owner_alive("manual__x", missing)


def test_crash_points_are_inert_unless_armed(monkeypatch, tmp_path):
    monkeypatch.delenv("TIDEMARK_CRASH_AT", raising=False)
    crash.crash_point(crash.AFTER_OUTPUT_COMMIT)  # returns: nothing armed
    monkeypatch.setenv("TIDEMARK_CRASH_AT", crash.AFTER_LEDGER_COMMIT)
    crash.crash_point(crash.AFTER_OUTPUT_COMMIT)  # a different point: returns
    monkeypatch.setenv("TIDEMARK_CRASH_ONCE", str(tmp_path / "once"))
    (tmp_path / "once").write_text("")
    crash.crash_point(crash.AFTER_LEDGER_COMMIT)  # already crashed once: returns
    assert os.getpid()


def test_unknown_crash_point_is_an_error(monkeypatch):
    monkeypatch.setenv("TIDEMARK_CRASH_AT", "after_lunch")
    with pytest.raises(ValueError, match="not a crash point"):
        crash.crash_point(crash.AFTER_OUTPUT_COMMIT)
