"""Settings (tidemark.settings): where a pipeline's table lives."""

from __future__ import annotations

from tidemark.settings import resolve_table_uri


def test_table_locations_resolve_under_the_lake_root():
    assert resolve_table_uri("orders", "/data/lake") == "/data/lake/orders"
    assert resolve_table_uri("orders", "s3a://b/lake/") == "s3a://b/lake/orders"
    assert resolve_table_uri("/abs/t", "/data/lake") == "/abs/t"
    assert resolve_table_uri("file:///x/t", "/data/lake") == "file:///x/t"
