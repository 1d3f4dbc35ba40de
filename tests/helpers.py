"""Helpers for tests against the real broker and real Delta tables: the local stack's tools in
`devkit.localstack`, shared with the soak; and the one deadline-bounded poll the tests use."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from devkit.localstack import (  # noqa: F401
    S3_ACCESS_KEY,
    S3_SECRET_KEY,
    StandaloneCluster,
    at_ms,
    avro_value,
    aws_connection,
    bootstrap,
    create_topic,
    describe_group,
    end_offsets,
    free_port,
    past_ms,
    produce,
    produce_at_times,
    produce_pairs,
    produce_values,
    query,
    query_or_none,
    register_schema,
    registry_connection,
    s3_endpoint,
    s3_lake,
    schema_registry_url,
    service_env,
    set_compatibility,
    spark_connect_connection,
    spark_connect_url,
    start_holding_run,
    table_version,
    txn_version,
    unique,
)

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str | Callable[[], str], interval: float = 0.2) -> T:
    """Poll ``condition`` until it returns something truthy, and return that. After ``timeout`` seconds the
    test fails saying what it waited for: ``what`` is a text, or a callable that builds it at the time of
    failure (to show the last value seen). A condition may fail at once by raising."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what() if callable(what) else what}")
        time.sleep(interval)
