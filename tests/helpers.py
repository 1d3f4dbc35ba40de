"""Helpers for tests against the real broker and real Delta tables: the local stack's tools in
`devkit.localstack`, shared with the soak; and the one deadline-bounded poll the tests use."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from devkit.localstack import (  # noqa: F401
    S3_ACCESS_KEY,
    S3_SECRET_KEY,
    StandaloneCluster,
    at_ms,
    avro_value,
    aws_connection,
    bootstrap,
    create_topic,
    describe_group,
    end_offsets,
    free_port,
    free_port_blocks,
    free_ports,
    past_ms,
    produce,
    produce_at_times,
    produce_pairs,
    produce_values,
    query,
    query_or_none,
    register_schema,
    registry_connection,
    s3_endpoint,
    s3_lake,
    schema_registry_url,
    service_env,
    set_compatibility,
    spark_connect_connection,
    spark_connect_url,
    table_version,
    txn_version,
    unique,
)

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str | Callable[[], str], interval: float = 0.2) -> T:
    """Poll ``condition`` until it returns something truthy, and return that. After ``timeout`` seconds the
    test fails saying what it waited for: ``what`` is a text, or a callable that builds it at the time of
    failure (to show the last value seen). A condition may fail at once by raising."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP): its state in /proc/PID/stat is ``T``."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def wait_until_paused(process: subprocess.Popen, log: Path, what: str) -> None:
    """Until ``process`` (started in a session of its own) has stopped itself at its TIDEMARK_PAUSE_AT
    point; fails at once if it exits first, showing its ``log``."""
    def paused() -> bool:
        assert process.poll() is None, f"{what} exited before its pause:\n{log.read_text()[-4000:]}"
        return stopped(process.pid)

    wait_until(paused, 300, f"{what} to reach its pause point")


@contextlib.contextmanager
def paused_run(command: list[str], env: dict, log: Path, point: str, what: str) -> Iterator[subprocess.Popen]:
    """Starts ``command`` (a `tidemark run` or a job) in a session of its own with ``TIDEMARK_PAUSE_AT=point``
    and its output to ``log`` (a file: nothing reads a pipe while it is stopped), and yields it once it has
    stopped itself there; on leaving, continues its process group (SIGCONT). The caller then waits for it."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, env={**env, "TIDEMARK_PAUSE_AT": point}, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_paused(process, log, what)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGCONT)


def gate_udf(gate: Path, from_value: int | None = None, waiting: Path | None = None):
    """A Spark UDF (boolean, always true) that holds each row until the file ``gate`` exists: put in a read's filter,
    it keeps a batch's tasks waiting while the test does something at that moment. ``from_value``: only rows whose
    argument is at least that are held (the tasks before it finish); ``waiting``: a file the first held row creates.
    Its Python workers must run this interpreter (``spark.sparkContext.pythonExec``)."""
    from pyspark.sql import functions as F

    def held(value) -> bool:
        import os
        import time

        if from_value is not None and value < from_value:
            return True
        if waiting is not None:
            open(str(waiting), "a").close()
        deadline = time.monotonic() + 600  # a test that failed before it opened the gate frees Spark's cores
        while not os.path.exists(str(gate)) and time.monotonic() < deadline:
            time.sleep(0.05)
        return True

    return F.udf(held, "boolean")
