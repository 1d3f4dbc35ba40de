"""History tables (``keyed.history: scd2``; docs/DESIGN.md, *History tables*; pyspark imported lazily): a keyed table
that keeps every version of a key, each with the interval in which it was the key's row.

A key's *events* are its upserts and its ordered deletes (``delete_field`` under ``order_by``, Debezium's ``d``), one
per ordering: at equal orderings the later arrival wins, as in a keyed table (a later batch, then the later Kafka
position). Its *versions* are its upsert events in ordering order, each with ``valid_from`` (the version's ordering
value: the ``order_by`` field, or Debezium's ``source.ts_ms`` as a timestamp), ``valid_to`` (the next event's, null
when none) and ``is_current`` (no next event). A late change, older by the ordering, takes its place: the version
before it ends where it starts. Deletes leave no row, so every delete is kept in a small Delta table inside the
output table's folder (``_tidemark_history_deletes``, as the delete markers of a keyed table are), where a later
batch finds it.

A batch, under its marker:

* ``changes``: its good events at offsets the table has not applied, one per key and ordering;
* ``history_source``: the whole history of the keys it touches rebuilt from those events, the table's versions of
  those keys and their kept deletes: each version to insert or update (``u``), each version a delete at its ordering
  replaced (``d``), and the batch's deletes to keep (``r``);
* ``remember_deletes``: the batch's deletes into the deletes table, before the commit point (a retry of the frozen
  batch writes them again, the same);
* ``merge_history``: one MERGE on key and ordering that inserts, updates only the versions that differ, and removes;
  or, for the batch that creates the table, an append of its versions.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tidemark import storage
from tidemark.batch.spark.change_events import OP
from tidemark.batch.spark.merge import merge_retrying, merge_sql_run, ordering_columns, unapplied
from tidemark.formats.record_format import KeyedSpec
from tidemark.formats.records import HISTORY_COLUMNS
from tidemark.kafka.offsets import TopicPartition
from tidemark.storage import ObjectStore

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)

VALID_FROM, VALID_TO, IS_CURRENT = HISTORY_COLUMNS
DELETES_FOLDER = "_tidemark_history_deletes"
REMEMBER = "r"
"""``OP`` of a batch's delete in ``history_source``: kept in the deletes table, not merged."""
_SOURCE = "__tidemark_source"
"""1: an event of the batch; 0: one the table held (a version, or a kept delete)."""


def deletes_uri(table_uri: str) -> str:
    """Where a history table keeps its deletes: a Delta table inside the output table's folder."""
    return f"{table_uri.rstrip('/')}/{DELETES_FOLDER}"


def valid_time(spec: KeyedSpec) -> Column:
    """An event's point in time: the ``order_by`` field, or Debezium's ``source.ts_ms`` as a timestamp."""
    from pyspark.sql import functions as F

    if spec.envelope == "debezium":
        return F.timestamp_millis(F.col("cdc_ts_ms"))
    return F.col(f"`{spec.order_by[0]}`")


def _identity(spec: KeyedSpec) -> list[str]:
    """What identifies an event and a version: the key and the ordering."""
    return [*spec.keys, *ordering_columns(spec)]


def changes(rows: DataFrame, spec: KeyedSpec, applied: Mapping[TopicPartition, int]) -> DataFrame:
    """The batch's good events at offsets the table has not applied, one per key and ordering: the last by Kafka
    position (a filter on a row number: Spark keeps one row per group in each task before the shuffle)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    position = [F.col(c).desc() for c in ("kafka_offset", "kafka_partition", "kafka_topic")]
    last = Window.partitionBy(*[F.col(f"`{c}`") for c in _identity(spec)]).orderBy(*position)
    return unapplied(rows, applied).withColumn("_n", F.row_number().over(last)).where("_n = 1").drop("_n")


def history_source(spark, batch: DataFrame, spec: KeyedSpec, table_uri: str, columns: list[str],
                   store: ObjectStore | None = None) -> DataFrame:
    """The rows the batch's MERGE and deletes table need (see the module): ``columns`` (the table's, the history
    columns included) and ``OP``. The events of the keys the batch touches are ranked per key and ordering (the
    later batch first, then the batch's own over a kept copy of it), and the winners, in ordering order, give each
    version its interval."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    events_columns = [c for c in columns if c not in HISTORY_COLUMNS]
    keys, identity = list(spec.keys), _identity(spec)
    events = batch.select(*[F.col(f"`{c}`") for c in events_columns], F.col(OP), F.lit(1).alias(_SOURCE))
    if storage.open_table(table_uri, store) is not None:
        touched = events.select(*[F.col(f"`{k}`") for k in keys]).distinct()
        held = spark.read.format("delta").load(storage.spark_uri(table_uri)).join(touched, keys, "left_semi")
        present = set(held.columns)  # a column the batch adds is null in the versions before it
        events = events.unionByName(held.select(*[F.col(f"`{c}`") for c in events_columns if c in present],
                                                F.lit("u").alias(OP), F.lit(0).alias(_SOURCE)),
                                    allowMissingColumns=True)
        if storage.open_table(deletes_uri(table_uri), store) is not None:
            kept = spark.read.format("delta").load(storage.spark_uri(deletes_uri(table_uri))).join(
                touched, keys, "left_semi")
            events = events.unionByName(kept.select(*[F.col(f"`{c}`") for c in [*identity, "ingest_batch_id"]],
                                                    F.lit("d").alias(OP), F.lit(0).alias(_SOURCE)),
                                        allowMissingColumns=True)
    same = Window.partitionBy(*[F.col(f"`{c}`") for c in identity])
    ranked = events.withColumn("_n", F.row_number().over(
        same.orderBy(F.col("ingest_batch_id").desc(), F.col(_SOURCE).desc())))
    ranked = ranked.withColumn("_winner", F.first(F.when(F.col("_n") == 1, F.col(OP)), ignorenulls=True).over(
        same.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)))
    in_order = Window.partitionBy(*[F.col(f"`{k}`") for k in keys]).orderBy(
        *[F.col(f"`{c}`").asc() for c in ordering_columns(spec)])
    # An event's time is the latest of its own and those before it by the ordering: Debezium's source.ts_ms need
    # not grow with the position (a snapshot's reads, clock steps), and intervals that go back would overlap.
    # Under order_by the time is the ordering itself, so the running maximum is the event's own.
    winners = ranked.where("_n = 1").withColumn("_time", F.max(valid_time(spec)).over(
        in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    versions = (winners.withColumn(VALID_TO, F.lead(F.col("_time")).over(in_order))
                .withColumn(IS_CURRENT, F.lead(F.lit(True)).over(in_order).isNull())
                .withColumn(VALID_FROM, F.col("_time"))
                .withColumn(OP, F.when(F.col(OP) == "d", F.when(F.col(_SOURCE) == 1, F.lit(REMEMBER)))
                            .otherwise(F.lit("u"))))
    replaced = (ranked.where((F.col("_n") > 1) & (F.col(_SOURCE) == 0) & (F.col(OP) == "u")
                             & (F.col("_winner") == "d"))
                .withColumn(OP, F.lit("d")))
    versions = versions.where(F.col(OP).isNotNull()).select(*[F.col(f"`{c}`") for c in columns], F.col(OP),
                                                             F.col(_SOURCE))
    return versions.unionByName(replaced.select(*[F.col(f"`{c}`") for c in events_columns], F.col(OP),
                                                F.col(_SOURCE)), allowMissingColumns=True)


def remember_deletes(spark, source: DataFrame, spec: KeyedSpec, table_uri: str, pipeline: str, batch_id: int,
                     store: ObjectStore | None = None) -> None:
    """Keep the batch's deletes (``REMEMBER`` rows of ``history_source``) in the deletes table: one MERGE on key and
    ordering (or the append that creates it), run again on the new version when it loses to a concurrent rewrite
    (the maintenance DAG's OPTIMIZE of the deletes table). Idempotent: the same batch keeps the same deletes
    again."""
    from pyspark.sql import functions as F

    identity = _identity(spec)
    deletes = source.where(F.col(OP) == REMEMBER).select(*[F.col(f"`{c}`") for c in [*identity, "ingest_batch_id"]])
    if deletes.limit(1).count() == 0:
        return
    uri = storage.spark_uri(deletes_uri(table_uri))
    if storage.open_table(deletes_uri(table_uri), store) is None:
        deletes.write.format("delta").mode("append").save(uri)
        return
    view = f"tidemark_history_deletes_{abs(hash(table_uri))}"
    deletes.createOrReplaceTempView(view)
    on = " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in identity)
    try:
        merge_retrying(spark, f"MERGE INTO delta.`{uri}` AS t USING {view} AS s ON {on} "
                              f"WHEN MATCHED AND s.ingest_batch_id > t.ingest_batch_id THEN UPDATE SET * "
                              f"WHEN NOT MATCHED THEN INSERT *", uri, pipeline, batch_id)
    finally:
        spark.catalog.dropTempView(view)


def merge_history(spark, source: DataFrame, spec: KeyedSpec, table_uri: str, columns: list[str], *, app_id: str,
                  version: int, metadata: str) -> None:
    """The batch's one commit into an existing history table: a MERGE on key and ordering, under the batch's marker
    (``tidemark.batch.spark.merge.merge_sql_run``), that removes the versions a delete replaced, updates the versions
    that differ (a new ``valid_to``, a redelivered change) and inserts the new ones."""
    from pyspark.sql import functions as F

    view = f"tidemark_history_{abs(hash((app_id, version)))}"
    source.where(F.col(OP) != REMEMBER).select(*[F.col(f"`{c}`") for c in columns], F.col(OP), F.col(_SOURCE)) \
        .createOrReplaceTempView(view)
    on = " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in _identity(spec))
    # A version the table held changes only its interval; one of the batch (a change at a held version's ordering:
    # a redelivery, a correction) replaces it. No payload column is compared: a map column cannot be.
    differs = " OR ".join([f"s.{_SOURCE} = 1", *[f"NOT (t.`{c}` <=> s.`{c}`)" for c in (VALID_TO, IS_CURRENT)]])
    sql = (f"MERGE INTO delta.`{table_uri}` AS t USING {view} AS s ON {on} "
           f"WHEN MATCHED AND s.{OP} = 'd' THEN DELETE "
           f"WHEN MATCHED AND s.{OP} = 'u' AND ({differs}) THEN UPDATE SET "
           + ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)
           + f" WHEN NOT MATCHED AND s.{OP} = 'u' THEN INSERT ({', '.join(f'`{c}`' for c in columns)}) VALUES ("
           + ", ".join(f"s.`{c}`" for c in columns) + ")")
    try:
        merge_sql_run(spark, sql, table_uri, app_id=app_id, version=version, metadata=metadata)
    finally:
        spark.catalog.dropTempView(view)
