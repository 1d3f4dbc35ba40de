"""Crash points (tidemark.crash): inert unless armed, and only the known ones."""

from __future__ import annotations

import os

import pytest

from tidemark import crash


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
