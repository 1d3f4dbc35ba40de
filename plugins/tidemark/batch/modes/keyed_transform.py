"""A keyed table with a SQL transform (``tidemark.config.transforms``, ``tidemark.config.keyed_tables``): the transform
reshapes each upsert before the batch is reduced to the newest change per key and MERGEd; a delete passes untransformed
(it carries only its key and ordering). The rules beyond a transform's own: the output keeps the keys and the
ordering fields as decoded, and gives a record at most one row (one change of one key). Filtered upserts are
counted per partition in the MERGE commit's metadata, which finalize records in the ledger."""

from __future__ import annotations

import datetime as dt

from tidemark.batch.plan import BatchPlan
from tidemark.batch.read_checks import kafka_errors
from tidemark.errors import TransformError
from tidemark.formats.record_format import KeyedSpec
from tidemark.storage import ObjectStore


def _stamp(plan: BatchPlan) -> list:
    from tidemark.batch.spark import transform_sql

    return transform_sql.batch_columns(plan.batch_id, dt.datetime.now(dt.UTC))


def check(spark, rows, plan: BatchPlan, spec: KeyedSpec, store: ObjectStore | None) -> tuple[list[str], bool, dict]:
    """Before the read: the transform analyzed over the lazily built batch and its output checked against the
    table (``tidemark.batch.schemas.fit_transform_output``). Returns the MERGE's columns, whether they add columns to
    the table, and the columns to widen first."""
    from tidemark.batch import schemas
    from tidemark.batch.spark import transform_sql

    with kafka_errors(plan):
        changes, columns = transform_sql.keyed_changes(spark, rows, plan.pipeline, plan.format, plan.partition_by,
                                                         _stamp(plan), spec.keys, spec.order_by)
    output = {f.name: f.dataType.simpleString() for f in changes.schema.fields if f.name in columns}
    add_columns, widen = schemas.fit_transform_output(plan.pipeline, plan.table_uri, output,
                                                       schemas.table_columns(plan.table_uri, store),
                                                       plan.format.schema_changes)
    return columns, add_columns, widen


def changes(spark, rows, plan: BatchPlan, spec: KeyedSpec) -> tuple[object, dict]:
    """The cached batch's changes with the transform applied to its upserts, and the upserts it filtered per
    partition. A record given several rows, or one that fails the transform, refuses the batch (nothing
    written)."""
    from tidemark.batch.spark import batch_io, transform_sql

    shaped, _ = transform_sql.keyed_changes(spark, rows, plan.pipeline, plan.format, plan.partition_by,
                                              _stamp(plan), spec.keys, spec.order_by)
    try:
        with kafka_errors(plan):
            filtered, most = transform_sql.keyed_counts(rows, shaped)
    except TransformError:
        raise
    except Exception as exc:
        if batch_io.jvm_failure(exc) is not None:
            raise
        raise TransformError(f"batch {plan.batch_id}: a record fails the transform "
                             f"({transform_sql.spark_message(exc)}). Nothing was written; the batch stays planned. "
                             f"Make the SELECT total for such values (try_cast, try_divide...) and run again.",
                             pipeline=plan.pipeline) from None
    several = {tp: n for tp, n in most.items() if n > 1}
    if several:
        raise TransformError(f"batch {plan.batch_id}: the transform gave a record {max(several.values())} rows "
                             f"({', '.join(str(tp) for tp in several)}); on a keyed table a record is one change of "
                             f"one key, so it may give one row or none (no explode). Nothing was written.",
                             pipeline=plan.pipeline)
    return shaped, filtered
