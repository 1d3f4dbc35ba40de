"""How a batch of a pipeline with a SQL transform is written (``tidemark.transform``; docs/DESIGN.md,
*Transforms*): the SELECT checked before Kafka is read, the batch cached and counted, the transform run once to
count its output's coordinates (a record that fails it fails the batch before any write), the dead letters,
then the output with the good and filtered records per partition in its commit's metadata."""

from __future__ import annotations

import datetime as dt
import logging

from tidemark import crash, spark_io
from tidemark.batch.plan import BatchPlan
from tidemark.batch.read_checks import cached_and_counted, kafka_errors
from tidemark.batch.tables import Tally
from tidemark.errors import TidemarkError, TransformError
from tidemark.offsets import TopicPartition
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


def write(spark, rows, plan: BatchPlan, store: ObjectStore | None = None) -> dict[TopicPartition, Tally]:
    """A pipeline with a SQL transform (``tidemark.transform``): the SELECT is analyzed and checked against the
    table before Kafka is read; then, as for re-reads, the batch is cached and its good and bad records counted;
    then the output (the commit point), with the batch's marker and the good records per partition in its
    commit's metadata, which finalize reads back after a crash (the filtered ones are the good records without a
    row); then the dead letters, untransformed, as in the one-pass path (recovery completes them). A record that
    fails the SELECT fails the output's write, so nothing is written."""
    from tidemark import schemas, spark_transform

    fmt = plan.format
    stamp = spark_transform.batch_columns(plan.batch_id, dt.datetime.now(dt.UTC))
    with kafka_errors(plan):
        shaped = spark_transform.apply(spark, rows, plan.pipeline, fmt, plan.partition_by, stamp)
    output = {f.name: f.dataType.simpleString() for f in shaped.schema.fields}
    add_columns, widen = schemas.fit_transform_output(plan.pipeline, plan.table_uri, output,
                                                       schemas.table_columns(plan.table_uri, store), fmt.schema_changes)
    rows, tallies, bad = cached_and_counted(rows, plan)
    try:
        if not any(t.records for t in tallies.values()):
            log.info("pipeline '%s': batch %d: every record of its ranges is already in the output or the dead "
                     "letters; no table is written", plan.pipeline, plan.batch_id)
            return tallies
        shaped = spark_transform.apply(spark, rows, plan.pipeline, fmt, plan.partition_by, stamp)
        good = {tp: t.records - t.bad for tp, t in tallies.items()}
        try:
            with kafka_errors(plan):
                spark_io.append_marked(shaped, plan.table_uri, app_id=plan.pipeline, version=plan.batch_id,
                                       metadata=plan.commit_metadata(good), pipeline=plan.pipeline,
                                       partition_by=plan.partition_by, add_columns=add_columns, widen=widen,
                                       refused=f"batch {plan.batch_id}: another writer committed to {plan.table_uri} "
                                               f"while this run wrote the batch; the next run finds it or reads it "
                                               f"again")
        except Exception as exc:
            raise _transform_failed(spark, rows, plan, stamp, exc) from exc
        log.info("pipeline '%s': batch %d committed to %s (%d records read, %d bad)", plan.pipeline, plan.batch_id,
                 plan.table_uri, sum(t.records for t in tallies.values()), bad)
        crash.crash_point(crash.AFTER_OUTPUT_COMMIT)
        if bad:
            with kafka_errors(plan):
                spark_io.write_dead_letters(rows, plan)
            log.info("pipeline '%s': %d dead letters written to %s", plan.pipeline, bad, plan.dead_letter_uri)
        crash.crash_point(crash.AFTER_DEAD_LETTERS)
    finally:
        rows.unpersist()
    return tallies


def _transform_failed(spark, rows, plan: BatchPlan, stamp: list, exc: BaseException) -> BaseException:
    """A record failed the transform (an ANSI cast, a division by zero...): the error names Spark's message and,
    found by bisection over the cached records, where the first failing record lies. Other failures (Kafka,
    storage) are returned as they are."""
    from tidemark import spark_transform

    if isinstance(exc, TidemarkError) or spark_io.jvm_failure(exc) is not None:
        return exc
    found = spark_transform.first_failing(spark, rows, plan.pipeline, plan.format, plan.partition_by, stamp,
                                          plan.ranges)
    if found is None:  # no partition's records fail the transform on their own: not a record's failure
        return exc
    where, why = found
    return TransformError(
        f"batch {plan.batch_id}: a record fails the transform ({why}); the first is in {where}. Nothing was "
        f"written; the batch stays planned. Make the SELECT total for such values (try_cast, try_divide, "
        f"try_element_at...) and run again.", pipeline=plan.pipeline)
