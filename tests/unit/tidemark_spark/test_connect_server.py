"""The warm path's server driver (tidemark_spark.connect_server): it serves until a signal, and never outlives its
JVM (a Python driver left behind would hold nothing but memory)."""

from __future__ import annotations

import threading
import time


def test_the_driver_serves_until_it_is_told_to_stop(monkeypatch):
    from tidemark_spark import connect_server

    monkeypatch.setattr(connect_server, "PARENT_POLL_S", 0.01)
    stopped, polls = threading.Event(), []

    def parent_alive() -> bool:
        polls.append(1)
        if len(polls) == 5:
            stopped.set()  # SIGTERM's handler, as `scripts/connect.sh down` sends it
        return True

    started = time.monotonic()
    connect_server.serve(stopped, parent_alive)
    assert stopped.is_set() and len(polls) == 5 and time.monotonic() - started < 10


def test_the_driver_leaves_when_its_jvm_is_gone(monkeypatch, caplog):
    from tidemark_spark import connect_server

    monkeypatch.setattr(connect_server, "PARENT_POLL_S", 0.01)
    alive = iter([True, True, False])
    connect_server.serve(threading.Event(), lambda: next(alive))  # returns; a fourth poll would raise StopIteration
    assert "JVM is gone" in caplog.text
