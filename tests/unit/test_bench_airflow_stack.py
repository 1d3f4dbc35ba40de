"""The benchmark's Airflow stacks run their batches on the Spark connection a part passes: a part that passes
spark-submit on `local[2]` (the same string as scripts/env.sh's default) must not get `make airflow`'s warm path,
or it compares a DAG on a warm server with a job by spark-submit (as the scheduler part did from 2026-11-28 to
2026-11-29). `scripts/airflow.sh launcher` answers which launcher `up` would give; no service starts."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from bench.airflow_services import SCRIPT, Airflow
from bench.knobs import BenchSettings


def launcher_line(tmp_path: Path, **env: str) -> str:
    settings = BenchSettings(records=1, record_bytes=1, partitions=1, repeats=1, master="local[2]",
                             driver_memory="1g", ledger_sizes=(), ledger_small_commits=0, work=tmp_path,
                             kafka_port=19292)
    stack = Airflow(settings, home=tmp_path / "airflow", airflow_port=1, pg_port=2, **env)
    try:
        done = subprocess.run([str(SCRIPT), "launcher"], env={**stack.env, "CONNECT_PORT": "15777"},
                              capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(stack.pg_home, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_spark_submit_on_the_benchmarks_master_is_spark_submit(tmp_path):
    assert launcher_line(tmp_path) == "spark:     a spark-submit JVM per batch (LAUNCHER=submit)"


def test_the_fleets_warm_connection_is_the_one_the_batches_use(tmp_path):
    # bench/fleet.py's warm phase: its own Connect server on its own port
    warm = json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": 34502})
    line = launcher_line(tmp_path, AIRFLOW_CONN_SPARK_DEFAULT=warm)
    assert line == "spark:     the connection of AIRFLOW_CONN_SPARK_DEFAULT (no Spark Connect server started)"
