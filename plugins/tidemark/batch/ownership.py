"""Who may work on a pipeline's pending batch: the run that froze it (or took it over).

A run is named by an *owner id*, stored in the ledger's ``dag_run_id`` column: an Airflow DAG run
id, or ``cli:<host>:<pid>:<start>`` for a run started outside Airflow (``tidemark run``), so that
its liveness can be checked. Taking a batch from a live run is the one thing that must not happen,
so an owner whose state cannot be known counts as alive.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

CLI_PREFIX = "cli:"

RunStateLookup = Callable[[str], str]
"""Looks up an orchestrator run's state by its owner id (the Airflow adapter passes one built on
the Task SDK): ``queued`` and ``running`` mean alive."""


def cli_owner_id() -> str:
    """The owner id of a run started outside Airflow: host and pid, so liveness can be checked."""
    return f"{CLI_PREFIX}{socket.gethostname()}:{os.getpid()}:{int(time.time())}"


def is_owner_alive(owner: str, run_state: RunStateLookup | None = None) -> bool:
    """Whether the run that owns a pending batch may still be working on it. Unknown means alive."""
    if owner.startswith(CLI_PREFIX):
        _, host, pid, _ = owner.split(":", 3)
        if host != socket.gethostname():
            return True
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if run_state is None:
        return True
    try:
        return run_state(owner) in {"queued", "running"}
    except Exception as exc:  # the run is unknown to this Airflow: it cannot be running
        log.warning("cannot look up the state of run '%s' (%s); treating it as finished", owner, exc)
        return False
