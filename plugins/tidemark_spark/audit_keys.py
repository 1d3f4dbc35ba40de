"""The Spark side of ``tidemark audit --verify-sample`` on a keyed table (what it reads and how it is judged:
``tidemark.audit.keyed_sample``); run by the audit's job (``tidemark_spark.audit_decode``, which hands it a check
whose ``sample_keys`` is set).

Every piece of the check is read from Kafka with exactly its offsets and decoded by
``tidemark.batch.spark.shaping.to_rows`` with its batch's format; each good change keeps its key, its ordering, its
operation and one hash per compared column (``column_hashes``). ``tidemark.batch.spark.merge.newest_changes`` (no high
water) reduces them to the newest change per key, which is kept on the executors (``persist``) for two jobs: counting
the keys, and picking ``sample_keys`` of them by a seeded hash of the key (random, and the same for the same seed),
joined with the table's rows of those keys. Only the picked keys reach the driver.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from functools import reduce

from tidemark import storage
from tidemark.audit.keyed_sample import COORDINATES
from tidemark.audit.typed_sample import ValueCheck
from tidemark.batch.schemas import table_columns
from tidemark.batch.spark import merge, shaping
from tidemark.batch.spark.batch_io import kafka_source_options, read_ranges
from tidemark.formats.record_format import KeyedSpec
from tidemark_spark.column_hashes import hashes, to_table_types

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_OP = merge.OP


def kafka_changes(spark, check: ValueCheck, properties: Mapping[str, str], compared: list[str],
                  table: Mapping[str, str], spec: KeyedSpec):
    """The changes in the check's pieces as ingest decodes them: key, ordering, coordinates, ``error``, the
    operation and (good changes) the hashes of the compared columns. ``table``: the output's column types."""
    from pyspark.sql import functions as F

    needed = list(dict.fromkeys([*spec.keys, *merge.ordering_columns(spec), *COORDINATES]))
    changes = None
    for indexes in check.reads():
        plan = check.read_plan(indexes)
        rows = shaping.to_rows(read_ranges(spark, kafka_source_options(plan, properties, check.isolation_level)),
                                     check.format_of(plan.batch_id), plan.batch_id, _EPOCH)
        good = F.col("error").isNull()
        one = rows.select(*needed, "error", _OP, F.when(good, hashes(compared, set(rows.columns),
                                                                     to_table_types(rows, table))).alias("_cols"))
        changes = one if changes is None else changes.unionByName(one)
    return changes


def table_rows(spark, check: ValueCheck, compared: list[str], keys: list[str], store=None):
    """The table's rows at the check's version as (``_t0``, ``_t1``, ... the key; ``_held``: the hashes); None when
    there is no table."""
    from pyspark.sql import functions as F

    if storage.open_table(check.table_uri, store) is None:
        return None
    reader = spark.read.format("delta")
    if check.table_version is not None:  # the snapshot whose marker bounded the ranges read
        reader = reader.option("versionAsOf", check.table_version)
    held = reader.load(check.table_uri)
    if "is_current" in held.columns and check.format_of(check.ranges[0]["batch_id"]).keyed.keeps_history:
        held = held.where("is_current")  # a history table: the key's row now is its current version
    return held.select(*[F.col(f"`{k}`").alias(f"_t{i}") for i, k in enumerate(keys)],
                       hashes(compared, set(held.columns)).alias("_held"))


def compare_keys(spark, check: ValueCheck, properties: Mapping[str, str], store=None) -> dict:
    """``keys_read`` (keys with a change in the pieces), ``columns`` (the compared columns) and ``sampled``: per
    picked key, ``key``, its newest change's ``topic``, ``partition``, ``offset``, ``op`` and hashes (``kafka``),
    and the hashes of each row the table holds for it (``table``)."""
    from pyspark.sql import functions as F

    table = table_columns(check.table_uri, store) or {}
    compared = [*COORDINATES, *check.compared_columns(table)]
    spec = check.format_of(check.ranges[0]["batch_id"]).keyed
    keys = list(spec.keys)
    newest = merge.newest_changes(kafka_changes(spark, check, properties, compared, table, spec), spec, {})
    newest = newest.select(*[F.col(f"`{k}`") for k in keys], _OP, *COORDINATES, "_cols",
                           F.xxhash64(*[F.col(f"`{k}`") for k in keys], F.lit(check.seed)).alias("_pick")).persist()
    try:
        keys_read = newest.count()
        picked = newest.orderBy("_pick", *keys).limit(check.sample_keys)
        held = table_rows(spark, check, compared, keys, store)
        deleted_present, deleted_keys = 0, []
        if held is None:
            joined = picked.withColumn("_held", F.lit(None).cast("array<bigint>"))
        else:
            joined = picked.join(held, _on(picked, held, keys), "left")
            deleted_present, deleted_keys = _deleted_present(newest, held, keys, check.detail_limit)
        found = joined.select(*[F.col(f"`{k}`") for k in keys], _OP, *COORDINATES, "_cols", "_held").collect()
    finally:
        newest.unpersist()
    return {"keys_read": keys_read, "columns": compared, "sampled": sampled(found, keys),
            "deleted_present": deleted_present, "deleted_keys": deleted_keys}


def _on(changes, held, keys: list[str]):
    return reduce(lambda a, b: a & b, [changes[f"`{k}`"].eqNullSafe(held[f"_t{i}"]) for i, k in enumerate(keys)])


def _deleted_present(newest, held, keys: list[str], limit: int) -> tuple[int, list[dict]]:
    """Every key whose newest change is a delete and that the table still holds: how many, and the first
    ``limit`` (key and the delete's coordinates). One semi join of the deletes with the table's keys."""
    from pyspark.sql import functions as F

    deletes = newest.where(F.col(_OP) == "d")
    present = deletes.join(held.select(*[f"_t{i}" for i in range(len(keys))]), _on(deletes, held, keys), "left_semi")
    present = present.select(*[F.col(f"`{k}`") for k in keys], *COORDINATES).persist()
    try:
        count = present.count()
        first = present.orderBy(*COORDINATES).limit(limit).collect() if count else []
    finally:
        present.unpersist()
    return count, [{"key": {k: r[k] for k in keys}, "topic": r["kafka_topic"], "partition": int(r["kafka_partition"]),
                    "offset": int(r["kafka_offset"])} for r in first]


def sampled(found, keys: list[str]) -> list[dict]:
    """The joined rows (one per row the table holds for a picked key, or one with no ``_held``) per key."""
    per_key: dict[str, dict] = {}
    for r in found:
        key = {k: r[k] for k in keys}
        text = json.dumps(key, default=str, sort_keys=True)
        entry = per_key.setdefault(text, {
            "key": json.loads(text), "topic": r["kafka_topic"], "partition": int(r["kafka_partition"]),
            "offset": int(r["kafka_offset"]), "op": r[_OP], "kafka": list(r["_cols"]), "table": []})
        if r["_held"] is not None:
            entry["table"].append(list(r["_held"]))
    return list(per_key.values())
