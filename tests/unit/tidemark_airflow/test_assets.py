"""The Airflow asset of an output table (tidemark_airflow.assets)."""

from __future__ import annotations

import pytest

from tidemark.config.pipeline import parse_pipeline


@pytest.mark.parametrize(("table", "location"), [
    ("s3a://lake/tidemark/orders", "s3://lake/tidemark/orders"),
    ("s3://lake/tidemark/orders", "s3://lake/tidemark/orders"),
    ("/data/lake/orders", "file:///data/lake/orders"),
])
def test_the_location_of_a_table_as_lineage_spells_it(table, location):
    from tidemark_airflow.assets import asset_location

    assert asset_location(table) == location


def test_the_asset_keeps_its_identity_when_the_table_moves():
    """Airflow refuses an outlet whose name is already taken by an active asset with another URI: the
    identity must not follow the location (issue 24: a table moved from the disk to S3)."""
    from tidemark_airflow.assets import table_asset

    on_disk = table_asset(parse_pipeline({"name": "orders", "topics": ["o"], "table": "/data/lake/orders"}, "t"))
    on_s3 = table_asset(parse_pipeline({"name": "orders", "topics": ["o"], "table": "s3a://lake/orders"}, "t"))
    assert (on_disk.name, on_disk.uri) == (on_s3.name, on_s3.uri) == ("tidemark/orders", "tidemark://pipelines/orders")
    assert (on_disk.extra["table"], on_s3.extra["table"]) == ("file:///data/lake/orders", "s3://lake/orders")
