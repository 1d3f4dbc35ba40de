"""Launching the ingest job outside Airflow (``tidemark run``, tests, the soak): the same
spark-submit command the Airflow operator builds, from plain values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tidemark.commit import BatchPlan
from tidemark.settings import spark_jars

INGEST_SCRIPT = str(Path(__file__).resolve().parents[2] / "spark_jobs" / "ingest.py")
DEFAULT_CONF = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false"}


def local_spark_env() -> dict[str, str]:
    """Environment for spark-submit from this virtualenv: the pip-installed Spark as SPARK_HOME
    and this interpreter for the driver and Python workers."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    spark_home = os.path.dirname(spec.origin) if spec and spec.origin else ""
    return {"SPARK_HOME": os.environ.get("SPARK_HOME", spark_home), "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable}


def spark_submit_command(plan: BatchPlan, master: str, isolation_level: str,
                         conf: Mapping[str, str] | None = None, driver_memory: str = "1g") -> list[str]:
    spark_submit = str(Path(local_spark_env()["SPARK_HOME"]) / "bin" / "spark-submit")
    command = [spark_submit, "--master", master, "--driver-memory", driver_memory, "--name",
               f"tidemark-{plan.pipeline}", "--jars", ",".join(spark_jars())]
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        command += ["--conf", f"{key}={value}"]
    return command + [INGEST_SCRIPT, "--plan", plan.to_json(), "--isolation-level", isolation_level]


def run_ingest_job(plan: BatchPlan, kafka_properties: Mapping[str, str], master: str, isolation_level: str,
                   conf: Mapping[str, str] | None = None, extra_env: Mapping[str, str] | None = None) -> int:
    """Run the ingest job to completion; its output streams to this process's stdout/stderr.
    Kafka properties travel in the environment, never on the command line."""
    env = {**os.environ, **local_spark_env(), **(extra_env or {}),
           "TIDEMARK_KAFKA_PROPERTIES": json.dumps(dict(kafka_properties))}
    return subprocess.call(spark_submit_command(plan, master, isolation_level, conf), env=env)
