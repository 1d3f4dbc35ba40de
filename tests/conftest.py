"""Shared fixtures. Tests that need a service fail loudly when it is missing; they never skip.
`make test` starts the broker (scripts/test.sh); run single tests after `make kafka-up`."""

from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path

import pytest

from tests import helpers

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
# The tier of each test folder: ``pytest -m unit`` runs the tests that need no service.
TIERS = {"unit": "unit", "dags": "unit", "integration": "integration", "e2e": "e2e"}
# The longest modules, longest first (as the run's module summary measured them on 2 cores). `make test` runs
# two pytest-xdist workers that each take whole modules in collection order, so the long ones go first and no
# worker is left with one at the end.
LONGEST_FIRST = ["e2e/test_local_airflow.py", "integration/test_lake_on_s3.py", "integration/test_crash_points.py",
                 "integration/test_object_store_server.py", "e2e/test_ingest_dag.py", "e2e/test_cluster_on_s3.py",
                 "e2e/test_security.py", "e2e/test_avro_dag.py", "integration/test_faults.py", "e2e/test_retry.py",
                 "integration/test_replay.py", "integration/test_avro.py", "e2e/test_manual_modes.py",
                 "integration/test_install.py", "integration/test_schema_evolution.py",
                 "integration/test_spark_connect.py", "integration/test_dead_letters.py",
                 "integration/test_backfill.py"]


def _relative(item) -> Path | None:
    """The test's file relative to tests/, or None for a test from elsewhere."""
    try:
        return Path(str(item.path)).resolve().relative_to(TESTS)
    except ValueError:
        return None


def _module_rank(item) -> int:
    relative = _relative(item)
    module = relative.as_posix() if relative else None
    return LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items) -> None:
    """Mark every test with the tier of its folder (tests/unit and tests/dags are ``unit``); run the
    longest modules first (LONGEST_FIRST). Slow tests carry ``slow`` in their own modules."""
    items.sort(key=_module_rank)  # stable: the order within and after them is unchanged
    for item in items:
        relative = _relative(item)
        tier = TIERS.get(relative.parts[0]) if relative else None
        if tier is not None and item.get_closest_marker(tier) is None:
            item.add_marker(getattr(pytest.mark, tier))


_MODULE_SECONDS: Counter[tuple[str, str]] = Counter()


def pytest_runtest_logreport(report) -> None:
    """Add up each module's time (setup, call and teardown) per worker, for the summary below. Under
    pytest-xdist the controller receives every worker's reports, each with its worker in ``node``."""
    node = getattr(report, "node", None)
    worker = node.gateway.id if node is not None else "main"
    _MODULE_SECONDS[worker, report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter, config) -> None:
    """The slowest modules and each worker's busy time: what LONGEST_FIRST should follow, and how evenly
    the workers were loaded (their difference is time one worker sat idle at the end)."""
    if hasattr(config, "workerinput") or not _MODULE_SECONDS:
        return
    terminalreporter.write_sep("=", "slowest modules (setup + call + teardown)")
    for (worker, module), seconds in _MODULE_SECONDS.most_common(20):
        terminalreporter.write_line(f"{seconds:8.1f}s  {worker:5}  {module}")
    busy: Counter[str] = Counter()
    for (worker, _), seconds in _MODULE_SECONDS.items():
        busy[worker] += seconds
    terminalreporter.write_line("busy: " + ", ".join(f"{w} {s:.0f} s" for w, s in sorted(busy.items())))


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    from kafka.admin import KafkaAdminClient

    try:
        KafkaAdminClient(bootstrap_servers=helpers.bootstrap(), request_timeout_ms=5000).close()
    except Exception as exc:
        pytest.fail(f"no Kafka broker answers at {helpers.bootstrap()} ({exc}); `make test` starts one, "
                    f"or run `make kafka-up` (KAFKA_PORT={os.environ.get('KAFKA_PORT', '9092')}) first")
    return helpers.bootstrap()


@pytest.fixture(scope="session")
def schema_registry() -> str:
    """The Schema Registry's Confluent-compatible API URL (`make test` starts one: scripts/registry.sh)."""
    import requests

    url = helpers.schema_registry_url()
    try:
        requests.get(f"{url}/subjects", timeout=5).raise_for_status()
    except Exception as exc:
        pytest.fail(f"no Schema Registry answers at {url} ({exc}); `make test` starts one, or run "
                    f"`make registry-up` and export SCHEMA_REGISTRY_URL")
    return url


@pytest.fixture(scope="session")
def spark_connect() -> str:
    """The Spark Connect server's URL (`make test` starts one: scripts/connect.sh), for the warm path."""
    import socket

    url = helpers.spark_connect_url()
    host, port = url.removeprefix("sc://").rstrip("/").rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        pytest.fail(f"no Spark Connect server answers at {url} ({exc}); `make test` starts one, or run "
                    f"`scripts/connect.sh up` and export SPARK_CONNECT_URL")
    return url


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run, with the cached Kafka-source and Delta jars."""
    from pyspark.sql import SparkSession

    from tidemark.settings import spark_jars

    jars = spark_jars()
    if not jars:
        pytest.fail("no cached Spark jars in .cache/jars/spark; run `make jars`")
    session = (SparkSession.builder.master("local[2]").appName("tidemark-tests")
               .config("spark.jars", ",".join(jars))
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.databricks.delta.snapshotPartitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()
    logging.getLogger("py4j").setLevel(logging.WARNING)  # py4j's goodbye messages race the closed log stream


@pytest.fixture
def lake(tmp_path, monkeypatch) -> Path:
    """A fresh lake root (and so a fresh ledger) per test."""
    root = tmp_path / "lake"
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(root))
    monkeypatch.delenv("TIDEMARK_LEDGER_URI", raising=False)
    return root
