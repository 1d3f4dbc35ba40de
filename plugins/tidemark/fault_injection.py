"""Crash injection for tests and soak runs: ``TIDEMARK_CRASH_AT=<point>`` kills the process with
SIGKILL (no cleanup, no friendly exception) when it reaches that point of the protocol.

``TIDEMARK_CRASH_ONCE=<path>`` makes the crash happen once: the first process to reach the point
creates the file and dies; later attempts (Airflow's retry, the recovery run) find it and go on.
``TIDEMARK_PAUSE_AT=<point>`` freezes instead of killing: the process stops its whole process group
with SIGSTOP (the Spark driver's JVM as well as its Python side, when spark-submit was started in a
session of its own), until someone sends SIGCONT. That is how the tests reproduce a stale driver: one
that goes on after its orchestrator gave up on it and another run took its batch over.

Never set these in production.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import signal
import sys
import threading
import time

log = logging.getLogger(__name__)

AFTER_PLAN_FROZEN = "after_plan_frozen"
DURING_READ = "during_read"
AFTER_DEAD_LETTERS = "after_dead_letters"
AFTER_OUTPUT_COMMIT = "after_output_commit"
DURING_LEDGER_COMMIT = "during_ledger_commit"
AFTER_LEDGER_COMMIT = "after_ledger_commit"
POINTS = (AFTER_PLAN_FROZEN, DURING_READ, AFTER_DEAD_LETTERS, AFTER_OUTPUT_COMMIT, DURING_LEDGER_COMMIT,
          AFTER_LEDGER_COMMIT)


def _armed(point: str) -> bool:
    target = os.environ.get("TIDEMARK_CRASH_AT")
    if not target:
        return False
    if target not in POINTS:
        raise ValueError(f"TIDEMARK_CRASH_AT={target!r} is not a crash point ({', '.join(POINTS)})")
    if target != point:
        return False
    once = os.environ.get("TIDEMARK_CRASH_ONCE")
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
    return True


def _kill(point: str) -> None:
    log.warning("TIDEMARK_CRASH_AT=%s: killing process %d with SIGKILL", point, os.getpid())
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def crash_point(point: str) -> None:
    """Die here if ``TIDEMARK_CRASH_AT`` names this point; freeze if ``TIDEMARK_PAUSE_AT`` does."""
    if _armed(point):
        _kill(point)
    if os.environ.get("TIDEMARK_PAUSE_AT") == point:
        log.warning("TIDEMARK_PAUSE_AT=%s: stopping process group %d with SIGSTOP", point, os.getpgrp())
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.killpg(os.getpgrp(), signal.SIGSTOP)
        log.warning("TIDEMARK_PAUSE_AT=%s: continued", point)


_soon: list[str] = []
"""The points `crash_soon` armed in this process."""


def crash_soon(point: str, max_delay_s: float = 0.3) -> None:
    """Die at a random moment within ``max_delay_s`` from now, from a background thread, so the
    kill lands in the middle of whatever the caller does next (a ledger commit, say)."""
    if _armed(point):
        delay = random.uniform(0, max_delay_s)
        threading.Thread(target=lambda: (time.sleep(delay), _kill(point)), daemon=True).start()
        _soon.append(point)
        atexit.register(_kill, point)  # at the latest before a normal exit: an armed run never reports success


def before_exit() -> None:
    """For a process that leaves without its atexit handlers (``os._exit``: the warm-path job): the kill that
    `crash_soon` promised, if its thread has not struck yet. An armed run never reports success."""
    for point in _soon:
        _kill(point)


def crash_when_spark_is_busy(point: str, spark) -> None:
    """Die as soon as Spark has a stage running (the Kafka read happens inside the write's stage)."""
    if not _armed(point):
        return
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        # Spark Connect: no status tracker on the client; the server reports each operation's progress
        # (every 2 s by default: often enough here to land inside a small test batch's read)
        def on_progress(stages, inflight_tasks, operation_id, done) -> None:
            if not done and (inflight_tasks or any(not stage.done for stage in stages or ())):
                _kill(point)

        spark.conf.set("spark.connect.progress.reportInterval", "50ms")
        spark.registerProgressHandler(on_progress)
        return

    def watch() -> None:
        tracker = spark.sparkContext.statusTracker()
        while not tracker.getActiveStageIds():
            time.sleep(0.02)
        _kill(point)

    threading.Thread(target=watch, daemon=True).start()
