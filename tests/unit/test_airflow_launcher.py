"""Which launcher `make airflow` gives the stack's batches (`scripts/airflow.sh launcher` prints the `spark:` line
`up` prints): the Spark Connect server by default, spark-submit with LAUNCHER=submit, and a Spark connection of the
caller's over both. No service starts; tests/e2e/test_local_airflow.py runs `up` with the default."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WARM = "spark:     the Spark Connect server at sc://127.0.0.1:15777 (the warm path; LAUNCHER=submit: none)"


def launcher(**env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "LAUNCHER", "CONNECT_"))}
    return subprocess.run([str(ROOT / "scripts" / "airflow.sh"), "launcher"], env={**base, "CONNECT_PORT": "15777",
                          **env}, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("env", "line"), [
    ({}, WARM),
    ({"LAUNCHER": "connect"}, WARM),
    # scripts/env.sh's spark-submit default, in a shell that sourced it, is no choice of the caller's
    ({"AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}'}, WARM),
    # the stack's own connection, in a shell that sourced its env.sh
    ({"AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark_connect", "host": "127.0.0.1", "port": 15777}'}, WARM),
    ({"LAUNCHER": "submit"}, "spark:     a spark-submit JVM per batch (LAUNCHER=submit)"),
    ({"AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "yarn"}'},
     "spark:     the connection of AIRFLOW_CONN_SPARK_DEFAULT (no Spark Connect server started)"),
    ({"AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "yarn"}', "LAUNCHER": "connect"},
     "spark:     the connection of AIRFLOW_CONN_SPARK_DEFAULT (no Spark Connect server started)"),
], ids=["default", "connect", "env.sh-default", "own-env.sh", "submit", "own-connection", "own-over-connect"])
def test_the_launcher_up_gives_the_batches(env, line):
    result = launcher(**env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == line


def test_an_unknown_launcher_is_refused_with_the_choices():
    result = launcher(LAUNCHER="yarn")
    assert result.returncode == 2
    assert "LAUNCHER=yarn is not a launcher of this stack; use connect" in result.stderr
    assert "or submit" in result.stderr
