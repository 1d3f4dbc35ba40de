"""A pipeline's output table as an Airflow Asset: the ingest task declares it as its outlet, and
each committed batch becomes an asset event whose extra says what arrived (``batch_summary``), so
a user's DAG can be scheduled on the table (``schedule=[table_asset(config)]``).

The asset's identity is the pipeline, not the table's location: its name is ``tidemark/<pipeline>``
and its URI ``tidemark://pipelines/<pipeline>``. Airflow keeps one active asset per name and per URI,
so an asset whose URI followed the location would be refused (``AirflowInactiveAssetInInletOrOutletException``)
the first time a table moved, from the local disk to S3 or to another bucket. Where the table lives
is in the asset's ``extra`` (``table``, as ``asset_location`` spells it) and in every event's extra."""

from __future__ import annotations

from pathlib import Path

ASSET_PREFIX = "tidemark/"
ASSET_URI_PREFIX = "tidemark://pipelines/"


def table_asset_name(pipeline: str) -> str:
    """The asset's name (a contract, like the DAG ids): downstream DAGs refer to the table by it."""
    return f"{ASSET_PREFIX}{pipeline}"


def asset_location(table_uri: str) -> str:
    """The table's location as lineage tools spell it: ``s3a://`` is written ``s3://`` (the same
    objects, the spelling the Amazon provider uses) and a local path becomes ``file://``."""
    if "://" not in table_uri:
        return Path(table_uri).absolute().as_uri()
    scheme, rest = table_uri.split("://", 1)
    return f"s3://{rest}" if scheme == "s3a" else table_uri


def table_asset(config):
    from airflow.sdk import Asset

    # the URI is the pipeline's, whatever the table's location (see the module's note)
    return Asset(name=table_asset_name(config.name), uri=f"{ASSET_URI_PREFIX}{config.name}",
                 extra={"pipeline": config.name, "format": "delta", "table": asset_location(config.table_uri)})
