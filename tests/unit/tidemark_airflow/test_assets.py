"""The Airflow asset of an output table (tidemark_airflow.assets)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("table", "uri"), [
    ("s3a://lake/tidemark/orders", "s3://lake/tidemark/orders"),
    ("s3://lake/tidemark/orders", "s3://lake/tidemark/orders"),
    ("/data/lake/orders", "file:///data/lake/orders"),
])
def test_the_asset_uri_of_a_table(table, uri):
    from tidemark_airflow.assets import asset_uri

    assert asset_uri(table) == uri
