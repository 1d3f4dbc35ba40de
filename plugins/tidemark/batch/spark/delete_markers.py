"""Delete markers of a keyed table (docs/DESIGN.md, *Tombstones and delete markers*; pyspark imported lazily).

A delete that carries an ordering (a ``delete_field`` delete under ``order_by``, Debezium's ``d``) removes the
key's row, and the table then knows nothing of it: a change of that key that reaches Kafka later but is older by
the ordering (a late producer, a Debezium connector that redelivers old events after a restart) would bring the
key back. So each such delete leaves a marker, the key and the newest ordering of its deletes, in a small Delta
table inside the output table's folder (``_tidemark_delete_markers``: Delta readers of the output read only the
files its log lists, and VACUUM skips folders whose name starts with ``_``). Readers see a plain table, one row
per live key. Before a keyed batch's MERGE:

* ``against_markers``: an upsert older than its key's marker changes nothing (or, after a tombstone, leaves the
  key deleted), as one older than a delete of the same batch does (``tidemark.batch.spark.merge.newest_changes``);
* ``remember``: the batch's ordered deletes raise their keys' markers (a MERGE keeping the newest ordering), before
  the output's MERGE, so a crash between the two leaves markers that the retry of the same frozen batch writes
  again, the same.

Markers are kept for ``keyed.delete_retention`` (7 days by default) after they were last raised, then removed by
the maintenance DAG (``expire``, delta-rs); a change older than an expired marker is applied as if the delete
had never been seen, and ``tidemark audit`` reports the key it brings back while the delete is still in Kafka.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from tidemark import storage
from tidemark.batch.spark.merge import MARK, with_marks
from tidemark.formats.record_format import KeyedSpec
from tidemark.storage import ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

MARKERS_FOLDER = "_tidemark_delete_markers"
ORDERING, BATCH, MARKED_AT = "ordering", "batch_id", "marked_at"


def markers_uri(table_uri: str) -> str:
    """Where a keyed table's delete markers live: a Delta table inside the output table's folder."""
    return f"{table_uri.rstrip('/')}/{MARKERS_FOLDER}"


def against_markers(spark, newest: DataFrame, spec: KeyedSpec, table_uri: str,
                    store: ObjectStore | None = None) -> DataFrame:
    """``newest`` with each upsert older than its key's marker made harmless
    (``tidemark.batch.spark.merge.with_marks``). The table's own markers only: the batch's are in ``MARK`` already.
    Without a marker table, ``newest`` itself."""
    from functools import reduce

    from pyspark.sql import functions as F

    uri = markers_uri(table_uri)
    if storage.open_table(uri, store) is None:
        return newest
    held = spark.read.format("delta").load(storage.spark_uri(uri)).select(
        *[F.col(f"`{k}`").alias(f"_mk{i}") for i, k in enumerate(spec.keys)], F.col(ORDERING).alias("_marker"))
    on = reduce(lambda a, b: a & b, [newest[f"`{k}`"].eqNullSafe(held[f"_mk{i}"]) for i, k in enumerate(spec.keys)])
    joined = newest.join(held, on, "left")
    return with_marks(joined, spec, F.col("_marker")).drop(*[f"_mk{i}" for i in range(len(spec.keys))], "_marker")


def remember(spark, newest: DataFrame, spec: KeyedSpec, table_uri: str, batch_id: int,
             store: ObjectStore | None = None) -> None:
    """Raise the markers of the keys whose ordered deletes the batch holds (``MARK``) to the newest ordering of
    those deletes: one MERGE (or the append that creates the marker table). Idempotent: the same batch raises
    them to the same orderings again, and a marker never goes down."""
    from pyspark.sql import functions as F

    marks = newest.where(F.col(MARK).isNotNull()).select(
        *[F.col(f"`{k}`") for k in spec.keys], F.col(MARK).alias(ORDERING), F.lit(batch_id).cast("bigint").alias(BATCH),
        F.current_timestamp().alias(MARKED_AT))
    if marks.limit(1).count() == 0:
        return
    uri = markers_uri(table_uri)
    if storage.open_table(uri, store) is None:
        marks.write.format("delta").mode("append").save(storage.spark_uri(uri))
        return
    view = f"tidemark_marks_{abs(hash((table_uri, batch_id)))}"
    marks.createOrReplaceTempView(view)
    on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in spec.keys)
    try:
        spark.sql(f"MERGE INTO delta.`{storage.spark_uri(uri)}` AS t USING {view} AS s ON {on} "
                  f"WHEN MATCHED AND s.{ORDERING} > t.{ORDERING} THEN UPDATE SET * "
                  f"WHEN NOT MATCHED THEN INSERT *").collect()
    finally:
        spark.catalog.dropTempView(view)


def expire(table_uri: str, retention: dt.timedelta, store: ObjectStore | None = None,
           now: dt.datetime | None = None) -> int | None:
    """Remove the markers last raised more than ``retention`` ago (delta-rs; the maintenance DAG). Returns how
    many were removed, None when the table has no marker table."""
    table = storage.open_table(markers_uri(table_uri), store)
    if table is None:
        return None
    cutoff = (now or dt.datetime.now(dt.UTC)) - retention
    metrics = table.delete(f"{MARKED_AT} < '{cutoff.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}'")
    removed = int(metrics.get("num_deleted_rows", 0) or 0)
    log.info("%s: %d delete markers older than %s removed", markers_uri(table_uri), removed, retention)
    return removed

