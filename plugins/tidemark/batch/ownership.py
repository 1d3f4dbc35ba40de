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
from pathlib import Path

log = logging.getLogger(__name__)

CLI_PREFIX = "cli:"

RunStateLookup = Callable[[str], str]
"""Looks up an orchestrator run's state by its owner id (the Airflow adapter passes one built on
the Task SDK): only ``success`` and ``failed`` mean the run is over; any other answer (``queued``,
``running``, ``unknown``) counts as alive. A lookup that raises LookupError says the run does not exist;
any other exception it raises propagates (it is not an answer)."""
FINISHED = {"success", "failed"}


def cli_owner_id() -> str:
    """The owner id of a run started outside Airflow: host and pid, so liveness can be checked."""
    return f"{CLI_PREFIX}{socket.gethostname()}:{os.getpid()}:{int(time.time())}"


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from Linux's /proc; None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 (starttime), after pid and comm
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def is_owner_alive(owner: str, run_state: RunStateLookup | None = None) -> bool:
    """Whether the run that owns a pending batch may still be working on it. Unknown means alive."""
    if owner.startswith(CLI_PREFIX):
        _, host, pid, stamp = owner.split(":", 3)
        if host != socket.gethostname():
            return True
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        started = process_start_time(int(pid))
        # pids are reused (32,768 of them, shared with every JVM thread): a process that started after
        # the owner id was made is another process
        return started is None or not stamp.isdigit() or started <= int(stamp) + 1
    if run_state is None:
        return True
    try:
        return run_state(owner) not in FINISHED
    except LookupError as exc:  # the lookup's way to say the run does not exist (RunStateLookup); any other
        log.warning("run '%s' does not exist (%s); treating it as finished", owner, exc)  # error propagates
        return False
