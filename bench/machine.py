"""What the benchmark ran on: hardware, versions, and how busy the machine was."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from importlib.metadata import version
from pathlib import Path

import psutil

from bench.knobs import ROOT


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _java() -> str:
    result = subprocess.run(["java", "-version"], capture_output=True, text=True)
    return (result.stderr or result.stdout).splitlines()[0].strip()


def _jar_version(folder: Path, prefix: str) -> str:
    for jar in sorted(folder.glob(f"{prefix}-*.jar")):
        match = re.fullmatch(rf"{re.escape(prefix)}-([\d.]+)\.jar", jar.name)
        if match:
            return match.group(1)
    return "unknown"


def describe() -> dict:
    jars = ROOT / ".cache" / "jars"
    return {
        "cores": os.cpu_count(), "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu_model": _cpu_model(), "os": platform.platform(), "python": platform.python_version(), "java": _java(),
        "spark": version("pyspark"), "delta_spark": version("delta-spark"), "deltalake": version("deltalake"),
        "airflow": version("apache-airflow"), "kafka_broker": _jar_version(jars / "kafka", "kafka-server"),
        "spark_kafka_client": _jar_version(jars / "spark", "kafka-clients"),
    }


def load() -> dict:
    """Load averages and the CPU share of processes that are not this benchmark's (contention)."""
    one, five, fifteen = os.getloadavg()
    return {"load_1m": round(one, 2), "load_5m": round(five, 2), "load_15m": round(fifteen, 2)}
