"""A keyed batch in Spark (pyspark imported lazily): one Delta MERGE that applies the newest change of each key
under the batch's marker (docs/DESIGN.md, *Keyed tables*). The changes come from
``tidemark.batch.spark.change_events``, which gives each its operation (``OP``).

* ``newest_changes`` reduces the batch's good changes to the newest per key and drops those at offsets the table
  already applied; ``cached`` and ``materialize`` compute them once; ``merge`` MERGEs them.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidemark.batch.spark.change_events import OP
from tidemark.errors import KeyOrderingError
from tidemark.formats.record_format import KeyedSpec
from tidemark.kafka.offsets import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)

RESET = "__tidemark_reset"
"""Under an ordering: the newest change acts whatever the row's ordering (a tombstone, or a change after one)."""
MARK = "__tidemark_mark"
"""Under an ordering: the newest ordering of the key's ordered deletes in the batch (null when none)."""
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
"""Delta's SQL confs for the marker and metadata of DML commits (MERGE takes no writer options)."""


def _ordering(spec: KeyedSpec, side: str) -> list[str]:
    if spec.envelope == "debezium":
        return [f"{side}.cdc_position", f"{side}.cdc_ts_ms"]
    return [f"{side}.`{o}`" for o in spec.order_by] or [f"{side}.kafka_offset"]


def ordering_columns(spec: KeyedSpec) -> list[str]:
    """The columns a key's changes are ordered by: ``order_by``, Debezium's position then ``ts_ms``, or the offset."""
    return [c.split(".", 1)[1].strip("`") for c in _ordering(spec, "s")]


def ordering_struct(spec: KeyedSpec) -> Column:
    """A change's ordering as one comparable value (a struct of the ordering columns)."""
    from pyspark.sql import functions as F

    return F.struct(*[F.col(f"`{c}`") for c in ordering_columns(spec)])


def _newer(spec: KeyedSpec, resets: bool = True) -> str:
    """The MERGE condition under which the batch's change of a key replaces (or deletes) the table's row: its
    ordering is at or after the row's (a re-delivered change of the same ordering is applied again, the same
    values), or, under ``order_by``, it resets the key (``RESET``: a tombstone, or a change after a tombstone of
    its key in the batch), which acts whatever the row's ordering."""
    s, t = _ordering(spec, "s"), _ordering(spec, "t")
    newer = f"(struct({', '.join(s)}) >= struct({', '.join(t)}))"
    return f"(s.{RESET} OR {newer})" if resets and not spec.by_kafka_position else newer


def unapplied(rows: DataFrame, applied: Mapping[TopicPartition, int]) -> DataFrame:
    """The good changes (``OP`` not ``s``) at offsets the table has not applied: at or above each partition's high
    water (``applied``), so a re-read changes nothing."""
    from pyspark.sql import functions as F

    good = rows.where(F.col("error").isNull() & (F.col(OP) != "s")).drop("error")
    for tp, high in applied.items():
        good = good.where(~((F.col("kafka_topic") == tp.topic) & (F.col("kafka_partition") == tp.partition)
                            & (F.col("kafka_offset") < high)))
    return good


def newest_changes(rows: DataFrame, spec: KeyedSpec, applied: Mapping[TopicPartition, int]) -> DataFrame:
    """The batch's good changes at offsets the table has not applied (at or above each partition's high water),
    reduced to the newest per key (docs/DESIGN.md, *Keyed tables*, *Tombstones and delete markers*).

    Under the default ordering (the Kafka position) that is the last change of the key. Under ``order_by`` or
    Debezium's ordering it is the newest by the ordering, then the Kafka position, with two rules for deletes:

    * a tombstone has no ordering: it deletes the key's row whatever the row's ordering, and a change of the key
      after it on its partition re-inserts the key. So a key's changes are ranked first by how many of its
      tombstones precede them on their partition (the *generation*), then tombstone first, then the ordering;
      the winner carries ``RESET`` when it is a tombstone or follows one (the MERGE then acts whatever the row's
      ordering);
    * a delete that carries an ordering (``delete_field``, Debezium's ``d``) is remembered: ``MARK`` holds the
      newest ordering of the key's ordered deletes in the batch (null when none), and a winning upsert older than
      it changes nothing (``s``), or, when it follows a tombstone, leaves the key deleted (``d``).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    good = unapplied(rows, applied)
    order = [F.col(f"`{c}`") for c in ordering_columns(spec)]
    position = [F.col(c).desc() for c in ("kafka_offset", "kafka_partition", "kafka_topic")]
    by_key = Window.partitionBy(*spec.keys)
    if spec.by_kafka_position:
        # Two steps, the first the newest change of each key on each partition: a filter on a row number alone lets
        # Spark keep only that row of each key in each task before the shuffle (its window group limit), so the
        # shuffle carries about one row per key, not every change. The second ranks those few rows per key (a total
        # order: recomputing gives the same) and counts them: more than one is a key on two partitions.
        on_partition = Window.partitionBy(*spec.keys, "kafka_topic", "kafka_partition").orderBy(
            F.col("kafka_offset").desc())
        per_partition = good.withColumn("_n", F.row_number().over(on_partition)).where("_n = 1").drop("_n")
        window = by_key.orderBy(*[o.desc() for o in order], *position)
        newest = (per_partition.withColumn("_n", F.row_number().over(window))
                  .withColumn("_partitions", F.count(F.lit(1)).over(by_key)))
        return newest.where("_n = 1").drop("_n")
    tombstone = (F.col(OP) == "d") & order[0].isNull()
    if spec.order_by:  # Debezium's tombstones change nothing (``s``, dropped above): no generations there
        before = (Window.partitionBy(*spec.keys, "kafka_topic", "kafka_partition").orderBy("kafka_offset")
                  .rowsBetween(Window.unboundedPreceding, -1))
        generation = F.coalesce(F.sum(tombstone.cast("int")).over(before), F.lit(0))
    else:
        generation = F.lit(0)
    ranked = good.withColumn("_gen", generation).withColumn("_tomb", tombstone)
    window = by_key.orderBy(F.col("_gen").desc(), F.col("_tomb").desc(), *[o.desc() for o in order], *position)
    mark = F.max(F.when((F.col(OP) == "d") & ~F.col("_tomb"), ordering_struct(spec))).over(by_key)
    newest = ranked.withColumn(MARK, mark).withColumn("_n", F.row_number().over(window)).where("_n = 1")
    return with_marks(newest.withColumn(RESET, (F.col("_gen") > 0) | F.col("_tomb")), spec, F.col(MARK)).drop(
        "_n", "_gen", "_tomb")


def with_marks(newest: DataFrame, spec: KeyedSpec, mark: Column) -> DataFrame:
    """The newest changes with an upsert older than ``mark`` (a delete's ordering, or null) made harmless: it
    changes nothing (``s``), or, when it resets the key (it follows a tombstone, which deleted the row), it leaves
    the key deleted (``d``)."""
    from pyspark.sql import functions as F

    stale = (F.col(OP) == "u") & mark.isNotNull() & (ordering_struct(spec) < mark)
    return newest.withColumn(OP, F.when(stale, F.when(F.col(RESET), F.lit("d")).otherwise(F.lit("s")))
                             .otherwise(F.col(OP)))


CACHE_CONFS = {"spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true"}
"""While the newest changes are cached: Spark's adaptive execution may coalesce the cached plan's shuffle partitions
(off by default for a cached plan). Some 200,000 newest changes then make 2 cached partitions, not 200: every later
read of them (the MERGE reads them three times) runs 2 tasks instead of 200, which cost 14 s of a 2,000,000-change
batch's MERGE (docs/BENCHMARKS.md, *Keyed tables*)."""


@contextlib.contextmanager
def session_confs(spark, confs: Mapping[str, str]):
    """Spark SQL confs set for the block and put back afterwards (unset when they were not set)."""
    before = {k: spark.conf.get(k, None) for k in confs}
    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def cached(spark, newest: DataFrame) -> DataFrame:
    """The newest changes persisted (``CACHE_CONFS``); the caller unpersists them."""
    with session_confs(spark, CACHE_CONFS):
        return newest.persist()


def materialize(newest: DataFrame, spec: KeyedSpec) -> dict | None:
    """Compute the (cached) newest changes in one Spark job, the batch's one pass over Kafka, and under the default
    ordering (Kafka position) find in the same job a key that is on two partitions within the batch (``_partitions``).
    Returns that key, or None; ``refuse_key_on_two_partitions`` turns it into the batch's error."""
    from pyspark.sql import functions as F

    if not spec.by_kafka_position:
        newest.count()
        return None
    key = F.struct(*[F.col(f"`{k}`") for k in spec.keys])
    found = newest.agg(F.first(F.when(F.col("_partitions") > 1, key), ignorenulls=True).alias("key")).collect()[0]
    return found["key"].asDict() if found["key"] is not None else None


def refuse_key_on_two_partitions(key: dict | None, pipeline: str) -> None:
    """Under the default ordering (Kafka position), a key must stay on one partition: refuse the batch (nothing
    written) when a key is on two partitions within it (``materialize`` found it). A key whose row in the table
    came from another partition is refused by the MERGE itself (``_moved_clause``), which joins the two anyway."""
    if key is not None:
        raise KeyOrderingError(_two_partitions(pipeline, key, "within this batch"), pipeline=pipeline)


def _moved_clause(spec: KeyedSpec) -> str:
    """The MERGE's first clause under the default ordering: a change whose key's row came from another partition
    fails the MERGE (``raise_error``: the job fails, Delta commits nothing), naming both partitions and the key
    (``tidemark.batch.spark.batch_io.KEY_MOVED_MARK``; read back by ``_key_moved``)."""
    from tidemark.batch.spark.batch_io import KEY_MOVED_END, KEY_MOVED_MARK

    key = "to_json(named_struct(" + ", ".join(f"'{k}', s.`{k}`" for k in spec.keys) + "))"
    message = (f"concat('{KEY_MOVED_MARK} ', t.kafka_topic, ':', t.kafka_partition, ' ', s.kafka_topic, ':', "
               f"s.kafka_partition, ' ', {key}, ' {KEY_MOVED_END}')")
    return (f"WHEN MATCHED AND NOT (t.kafka_topic <=> s.kafka_topic AND t.kafka_partition <=> s.kafka_partition) "
            f"THEN UPDATE SET t.kafka_topic = raise_error({message}) ")


def _key_moved(cause: str, pipeline: str) -> KeyOrderingError:
    """The error of a MERGE that ``_moved_clause`` failed: ``cause`` is ``held_topic:p change_topic:p {key}``."""
    held, change, key = cause.split(" ", 2)
    return KeyOrderingError(_two_partitions(pipeline, json.loads(key), f"(the table's row came from {held}, this "
                                                                        f"change from {change})"), pipeline=pipeline)


def _two_partitions(pipeline: str, key: dict, where: str) -> str:
    return (f"key {json.dumps(key, default=str)} is on two partitions {where}. The default ordering of a keyed table "
            f"is the Kafka position, which orders the changes of a key only while they stay on one partition; name "
            f"a field that orders them (keyed.order_by: [updated_at], say). Nothing was written.")


MERGE_ATTEMPTS = 5
"""How many times a MERGE that lost to a concurrent rewrite of its files (an OPTIMIZE) runs on the new version."""


def merge_retrying(spark, sql: str, table_uri: str, pipeline: str, version: int) -> None:
    """Run the MERGE; one that lost to a commit that removed or added files it read (an OPTIMIZE beside the batch)
    runs again on the table's new version: nothing of it was committed, and the marker makes a MERGE that some
    other run committed meanwhile a no-op."""
    from tidemark.batch.spark.batch_io import jvm_failure
    from tidemark.errors import ConcurrentBatchWriteError

    for attempt in range(1, MERGE_ATTEMPTS + 1):
        try:
            spark.sql(sql).collect()
            return
        except Exception as exc:
            failure = jvm_failure(exc)
            if failure is not None and failure.kind == "key_moved":
                raise _key_moved(failure.cause, pipeline) from None
            if failure is None or failure.kind != "concurrent_rewrite":
                raise
            if attempt == MERGE_ATTEMPTS:
                raise ConcurrentBatchWriteError(
                    f"batch {version}: the MERGE into {table_uri} lost to concurrent commits {MERGE_ATTEMPTS} times "
                    f"({failure.cause}); nothing of it was committed, and the next attempt runs it again",
                    pipeline=pipeline) from None
            log.warning("MERGE into %s lost to a concurrent commit (%s, an OPTIMIZE?); attempt %d of %d runs it "
                        "again on the new version", table_uri, failure.cause, attempt, MERGE_ATTEMPTS)


def _merge_sql(table_uri: str, view: str, spec: KeyedSpec, columns: list[str], add_columns: bool) -> str:
    """The MERGE of the changes in ``view``. Delta adds a column in a MERGE only through ``UPDATE SET *`` and
    ``INSERT *`` (with ``autoMerge``), which take every column of the source: when columns are added, the source
    is the output columns alone, a delete told apart by a null ``ingest_batch_id`` (a delete writes no row)."""
    on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in spec.keys)
    newer = _newer(spec, resets=not add_columns)  # ``merge`` adds the columns first when a change resets its key
    moved = _moved_clause(spec) if spec.by_kafka_position else ""
    if add_columns:
        kept = ", ".join(f"`{c}`" for c in columns if c != "ingest_batch_id")
        source = f"(SELECT {kept}, IF({OP} = 'd', NULL, ingest_batch_id) AS ingest_batch_id FROM {view})"
        delete, upsert = "s.ingest_batch_id IS NULL", "s.ingest_batch_id IS NOT NULL"
        update, insert = "UPDATE SET *", "INSERT *"
    else:
        source, delete, upsert = view, f"s.{OP} = 'd'", f"s.{OP} = 'u'"
        update = "UPDATE SET " + ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)
        insert = (f"INSERT ({', '.join(f'`{c}`' for c in columns)}) VALUES ("
                  + ", ".join(f"s.`{c}`" for c in columns) + ")")
    return (f"MERGE INTO delta.`{table_uri}` AS t USING {source} AS s ON {on} "
            f"{moved}WHEN MATCHED AND {delete} AND {newer} THEN DELETE "
            f"WHEN MATCHED AND {upsert} AND {newer} THEN {update} "
            f"WHEN NOT MATCHED AND {upsert} THEN {insert}")


def add_missing_columns(spark, newest: DataFrame, table_uri: str, columns: list[str]) -> None:
    """The changes' columns the table lacks, added by one ``ALTER TABLE ... ADD COLUMNS`` commit before the MERGE
    (without the batch's marker; it changes no value, as a widening before the MERGE does). A crash after it
    leaves the columns added and the batch not applied; the retry finds them and only MERGEs."""
    held = set(spark.read.format("delta").load(table_uri).columns)
    types = {f.name: f.dataType.simpleString() for f in newest.schema.fields}
    missing = [c for c in columns if c not in held]
    if missing:
        spark.sql(f"ALTER TABLE delta.`{table_uri}` ADD COLUMNS ("
                  + ", ".join(f"`{c}` {types[c]}" for c in missing) + ")").collect()
        log.info("%s: columns %s added before the MERGE (a change of the batch follows a tombstone)", table_uri,
                 ", ".join(missing))


def merge(spark, newest: DataFrame, spec: KeyedSpec, table_uri: str, columns: list[str], *, app_id: str,
          version: int, metadata: str, add_columns: bool) -> None:
    """One Delta MERGE (SQL, so that it runs on Spark Connect too) of the newest changes into the table, its
    commit carrying the marker (``txnAppId`` / ``txnVersion`` as SQL confs, which Delta reads for DML) and
    ``metadata``; Delta skips it when the table's marker is at or above ``version``. Inserts and updates take
    every column; a delete removes the row. ``add_columns``: the changes have columns the table lacks, which
    the commit adds (schema evolution), unless a change resets its key (``RESET``), which the source of such a
    MERGE cannot carry: the columns are then added first (``add_missing_columns``)."""
    from pyspark.sql import functions as F

    if add_columns and not spec.by_kafka_position and newest.where(F.col(RESET)).limit(1).count():
        add_missing_columns(spark, newest, table_uri, columns)
        add_columns = False
    view = f"tidemark_changes_{abs(hash((app_id, version)))}"
    newest.select(*columns, OP, *([] if spec.by_kafka_position else [RESET])).createOrReplaceTempView(view)
    sql = _merge_sql(table_uri, view, spec, columns, add_columns)
    try:
        merge_sql_run(spark, sql, table_uri, app_id=app_id, version=version, metadata=metadata,
                      add_columns=add_columns)
    finally:
        spark.catalog.dropTempView(view)


def merge_sql_run(spark, sql: str, table_uri: str, *, app_id: str, version: int, metadata: str,
                  add_columns: bool = False) -> None:
    """Run a batch's MERGE statement with its marker and ``metadata`` in the commit (Delta's SQL confs, set for the
    statement alone), again when it loses to a concurrent rewrite (``merge_retrying``)."""
    confs = {TXN_APP_ID: app_id, TXN_VERSION: str(version), USER_METADATA: metadata,
             "spark.databricks.delta.schema.autoMerge.enabled": "true" if add_columns else "false"}
    with session_confs(spark, confs):
        merge_retrying(spark, sql, table_uri, app_id, version)
