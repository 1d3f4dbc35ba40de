"""A pipeline's output table as an Airflow Asset: the ingest task declares it as its outlet, and
each committed batch becomes an asset event whose extra says what arrived (``batch_summary``), so
a user's DAG can be scheduled on the table (``schedule=[table_asset(config)]``)."""

from __future__ import annotations

from pathlib import Path

ASSET_PREFIX = "tidemark/"


def table_asset_name(pipeline: str) -> str:
    """The asset's name (a contract, like the DAG ids): downstream DAGs refer to the table by it."""
    return f"{ASSET_PREFIX}{pipeline}"


def asset_uri(table_uri: str) -> str:
    """The table's location as an asset URI: ``s3a://`` is written ``s3://`` (the same objects, the
    spelling lineage tools and the Amazon provider use) and a local path becomes ``file://``."""
    if "://" not in table_uri:
        return Path(table_uri).absolute().as_uri()
    scheme, rest = table_uri.split("://", 1)
    return f"s3://{rest}" if scheme == "s3a" else table_uri


def table_asset(config):
    from airflow.sdk import Asset

    return Asset(name=table_asset_name(config.name), uri=asset_uri(config.table_uri),
                 extra={"pipeline": config.name, "format": "delta"})
