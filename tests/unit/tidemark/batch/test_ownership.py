"""Who owns a frozen batch (tidemark.batch.ownership): CLI and Airflow owners' liveness."""

from __future__ import annotations

import os
import socket
import time

import pytest

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


@pytest.mark.parametrize(("state", "alive"), [("running", True), ("queued", True), ("unknown", True), ("failed", False),
                                              ("success", False)])
def test_airflow_owner_liveness_follows_the_dag_run_state(state, alive):
    assert is_owner_alive("manual__x", lambda run_id: state) is alive


def test_airflow_owner_is_assumed_alive_without_a_lookup_and_dead_when_unknown():
    assert is_owner_alive("manual__x")

    def missing(run_id):
        raise LookupError("no such run")

    assert not is_owner_alive("manual__x", missing)

    def failing(run_id):
        raise OSError("the API did not answer")

    with pytest.raises(OSError):  # not an answer: it propagates, and the owner keeps its batch
        is_owner_alive("manual__x", failing)
