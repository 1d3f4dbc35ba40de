"""Shared fixtures. Tests that need a service fail loudly when it is missing; they never skip.
`make test` starts the broker (scripts/test.sh); run single tests after `make kafka-up`."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests import helpers, module_order

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
# The tier of each test folder: ``pytest -m unit`` runs the tests that need no service.
TIERS = {"unit": "unit", "dags": "unit", "integration": "integration", "e2e": "e2e"}
# The module times the order follows (tests/module_order.py): read once by the controller, which hands them to
# each pytest-xdist worker, so that every worker collects the same order.
_DURATIONS: dict[str, float] | None = None


def _durations(config) -> dict[str, float]:
    global _DURATIONS
    if hasattr(config, "workerinput"):
        return config.workerinput.get("tidemark_durations", {})
    if _DURATIONS is None:
        _DURATIONS = module_order.load()
    return _DURATIONS


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist, on the controller: a worker is starting."""
    node.workerinput["tidemark_durations"] = _durations(node.config)


def _relative(item) -> Path | None:
    """The test's file relative to tests/, or None for a test from elsewhere."""
    try:
        return Path(str(item.path)).resolve().relative_to(TESTS)
    except ValueError:
        return None


def _module(item) -> str:
    relative = _relative(item)
    return relative.as_posix() if relative else str(item.path)


def pytest_collection_modifyitems(config, items) -> None:
    """Mark every test with the tier of its folder (tests/unit and tests/dags are ``unit``); run the
    longest modules of the last run first. Slow tests carry ``slow`` in their own modules."""
    rank = module_order.longest_first((_module(item) for item in items), _durations(config))
    items.sort(key=lambda item: rank[_module(item)])  # stable: a module's tests keep their order
    for item in items:
        relative = _relative(item)
        tier = TIERS.get(relative.parts[0]) if relative else None
        if tier is not None and item.get_closest_marker(tier) is None:
            item.add_marker(getattr(pytest.mark, tier))


_MODULE_SECONDS: Counter[tuple[str, str]] = Counter()
_TIMELINE: list[dict] = []
TIMELINE = TESTS.parent / ".cache" / "test-timeline.json"


def pytest_runtest_logreport(report) -> None:
    """Add up each module's time (setup, call and teardown) per worker, for the summary below. Under
    pytest-xdist the controller receives every worker's reports, each with its worker in ``node``."""
    node = getattr(report, "node", None)
    worker = node.gateway.id if node is not None else "main"
    _MODULE_SECONDS[worker, report.nodeid.split("::", 1)[0]] += report.duration
    _TIMELINE.append({"worker": worker, "test": report.nodeid, "when": report.when,
                      "start": round(report.start, 2), "stop": round(report.stop, 2)})


def pytest_sessionfinish(session) -> None:
    """The controller keeps this run's module times for the next run's order (tests/module_order.py)."""
    if hasattr(session.config, "workerinput"):
        return
    measured: Counter[str] = Counter()
    for (_, nodeid_path), seconds in _MODULE_SECONDS.items():
        try:
            module = (session.config.rootpath / nodeid_path).resolve().relative_to(TESTS).as_posix()
        except ValueError:
            continue  # a test from outside tests/
        measured[module] += seconds
    module_order.record(measured)
    # When each phase of each test ran on which worker: where a worker waited (a lock, a fixture) shows as a gap
    TIMELINE.parent.mkdir(parents=True, exist_ok=True)
    TIMELINE.write_text(json.dumps(_TIMELINE) + "\n")


def pytest_terminal_summary(terminalreporter, config) -> None:
    """The slowest modules and each worker's busy time: how evenly the workers were loaded (their
    difference is time one worker sat idle at the end)."""
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
def kafka_cluster_session():
    """The three-broker TLS cluster (scripts/kafka_cluster.sh; tests/kafka_cluster.py), started once if it
    is not running (KAFKA_CLUSTER_BASE_PORT picks its ports); `make kafka-cluster-down` stops it."""
    from tests.kafka_cluster import ensure_cluster

    try:
        return ensure_cluster()
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def kafka_cluster(kafka_cluster_session):
    """The cluster, in shared use while the test runs: a test that kills a broker (Cluster.alone) waits
    for it, and it waits for such a test."""
    with kafka_cluster_session.in_use() as cluster:
        yield cluster


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
    # Python workers, should a job start any, run this interpreter, as the launchers' jobs do
    # (tidemark_spark.submit.local_spark_env), not whichever python3 is first on the PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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
