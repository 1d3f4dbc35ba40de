"""Crash points (tidemark.fault_injection): inert unless armed, and only the known ones."""

from __future__ import annotations

import os

import pytest

from tidemark import fault_injection


def test_crash_points_are_inert_unless_armed(monkeypatch, tmp_path):
    monkeypatch.delenv("TIDEMARK_CRASH_AT", raising=False)
    fault_injection.crash_point(fault_injection.AFTER_OUTPUT_COMMIT)  # returns: nothing armed
    monkeypatch.setenv("TIDEMARK_CRASH_AT", fault_injection.AFTER_LEDGER_COMMIT)
    fault_injection.crash_point(fault_injection.AFTER_OUTPUT_COMMIT)  # a different point: returns
    monkeypatch.setenv("TIDEMARK_CRASH_ONCE", str(tmp_path / "once"))
    (tmp_path / "once").write_text("")
    fault_injection.crash_point(fault_injection.AFTER_LEDGER_COMMIT)  # already crashed once: returns
    assert os.getpid()


def test_unknown_crash_point_is_an_error(monkeypatch):
    monkeypatch.setenv("TIDEMARK_CRASH_AT", "after_lunch")
    with pytest.raises(ValueError, match="not a crash point"):
        fault_injection.crash_point(fault_injection.AFTER_OUTPUT_COMMIT)


@pytest.mark.parametrize("leave", ["sys.exit(0)", "fault_injection.before_exit(); os._exit(0)"])
def test_a_run_armed_to_crash_soon_never_leaves_with_success(leave):
    """`crash_soon`'s kill comes from a thread after a random delay; a process that ends first is killed on the
    way out: by an atexit handler on a normal exit, by `before_exit` where it leaves with os._exit (the warm-path
    job). Either way the run does not report success."""
    import subprocess
    import sys

    script = ("import os, sys\nfrom tidemark import fault_injection\n"
              "fault_injection.crash_soon(fault_injection.DURING_LEDGER_COMMIT, max_delay_s=600)\n"
              f"print('done', flush=True)\n{leave}\n")
    env = {**os.environ, "TIDEMARK_CRASH_AT": fault_injection.DURING_LEDGER_COMMIT}
    env.pop("TIDEMARK_CRASH_ONCE", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, (done.returncode, done.stdout, done.stderr)
    assert "done" in done.stdout and "killing process" in done.stderr
