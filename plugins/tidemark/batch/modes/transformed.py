"""How a batch of a pipeline with a SQL transform is written (``tidemark.config.transforms``; docs/DESIGN.md,
*Transforms*): the SELECT checked before Kafka is read, the batch cached and counted, the transform run once to
count its output's coordinates (a record that fails it fails the batch before any write), the dead letters,
then the output with the good and filtered records per partition in its commit's metadata. Re-reads
(``dedupe``) skip what the output or dead letters already hold first."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping

from tidemark import fault_injection
from tidemark.batch.modes.base import Counted, WriteMode
from tidemark.batch.plan import BatchPlan
from tidemark.batch.read_checks import cached_and_counted, check_read, kafka_errors, nothing_left, stored
from tidemark.batch.spark import batch_io
from tidemark.batch.tables import Tally, batch_tallies, keyed_commit
from tidemark.errors import ReconciliationError, TidemarkError, TransformError
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.store import Ledger
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


class Transformed(WriteMode):
    name = "transform"

    def applies(self, plan: BatchPlan) -> bool:
        return bool(plan.format.transform)

    def write(self, spark, rows, plan: BatchPlan, properties: Mapping[str, str],
              store: ObjectStore | None) -> Counted:
        if plan.dedupe:
            rows = batch_io.drop_already_written(spark, rows, plan, store)
        return Counted(tallies=write(spark, rows, plan, store))

    def finalize(self, plan: BatchPlan, counted: Counted, store: ObjectStore | None) -> bool:
        return finalize_transformed(plan, counted.tallies, store)


def write(spark, rows, plan: BatchPlan, store: ObjectStore | None = None) -> dict[TopicPartition, Tally]:
    """A pipeline with a SQL transform (``tidemark.config.transforms``): the SELECT is analyzed and checked against the
    table before Kafka is read; then, as for re-reads, the batch is cached and its good and bad records counted;
    then the output (the commit point), with the batch's marker and the good records per partition in its
    commit's metadata, which finalize reads back after a crash (the filtered ones are the good records without a
    row); then the dead letters, untransformed, as in the one-pass path (recovery completes them). A record that
    fails the SELECT fails the output's write, so nothing is written."""
    from tidemark.batch import schemas
    from tidemark.batch.spark import transform_sql

    fmt = plan.format
    stamp = transform_sql.batch_columns(plan.batch_id, dt.datetime.now(dt.UTC))
    with kafka_errors(plan):
        shaped = transform_sql.apply(spark, rows, plan.pipeline, fmt, plan.partition_by, stamp)
    output = {f.name: f.dataType.simpleString() for f in shaped.schema.fields}
    add_columns, widen = schemas.fit_transform_output(plan.pipeline, plan.table_uri, output,
                                                       schemas.table_columns(plan.table_uri, store), fmt.schema_changes)
    rows, tallies, bad = cached_and_counted(rows, plan)
    try:
        if nothing_left(plan, tallies):
            return tallies
        shaped = transform_sql.apply(spark, rows, plan.pipeline, fmt, plan.partition_by, stamp)
        good = {tp: t.records - t.bad for tp, t in tallies.items()}
        try:
            with kafka_errors(plan):
                batch_io.append_marked(shaped, plan.table_uri, app_id=plan.pipeline, version=plan.batch_id,
                                       metadata=plan.commit_metadata(good), pipeline=plan.pipeline,
                                       partition_by=plan.partition_by, add_columns=add_columns, widen=widen,
                                       refused=f"batch {plan.batch_id}: another writer committed to {plan.table_uri} "
                                               f"while this run wrote the batch; the next run finds it or reads it "
                                               f"again")
        except Exception as exc:
            raise _transform_failed(spark, rows, plan, stamp, exc) from exc
        log.info("pipeline '%s': batch %d committed to %s (%d records read, %d bad)", plan.pipeline, plan.batch_id,
                 plan.table_uri, sum(t.records for t in tallies.values()), bad)
        fault_injection.crash_point(fault_injection.AFTER_OUTPUT_COMMIT)
        if bad:
            with kafka_errors(plan):
                batch_io.write_dead_letters(rows, plan)
            log.info("pipeline '%s': %d dead letters written to %s", plan.pipeline, bad, plan.dead_letter_uri)
        fault_injection.crash_point(fault_injection.AFTER_DEAD_LETTERS)
    finally:
        rows.unpersist()
    return tallies


def _transform_failed(spark, rows, plan: BatchPlan, stamp: list, exc: BaseException) -> BaseException:
    """A record failed the transform (an ANSI cast, a division by zero...): the error names Spark's message and,
    found by bisection over the cached records, where the first failing record lies. Other failures (Kafka,
    storage) are returned as they are."""
    from tidemark.batch.spark import transform_sql

    if isinstance(exc, TidemarkError) or batch_io.jvm_failure(exc) is not None:
        return exc
    found = transform_sql.first_failing(spark, rows, plan.pipeline, plan.format, plan.partition_by, stamp,
                                          plan.ranges)
    if found is None:  # no partition's records fail the transform on their own: not a record's failure
        return exc
    where, why = found
    return TransformError(
        f"batch {plan.batch_id}: a record fails the transform ({why}); the first is in {where}. Nothing was "
        f"written; the batch stays planned. Make the SELECT total for such values (try_cast, try_divide, "
        f"try_element_at...) and run again.", pipeline=plan.pipeline)


def finalize_transformed(plan: BatchPlan, tallies: dict[TopicPartition, Tally] | None,
                          store: ObjectStore | None) -> bool:
    """A transform's batch: one record gives 0, 1 or several rows, so the output is counted by distinct
    coordinate. The good records come from what Spark counted before the write (``tallies``) or, after a
    crash, from the output commit's metadata; the filtered ones are the good records without a row. The
    output's coordinates and the dead letters are checked against the frozen ranges, as for an append."""
    output = batch_tallies(plan.table_uri, plan.batch_id, store, distinct=True)
    dead = batch_tallies(plan.dead_letter_uri, plan.batch_id, store)
    check_read(plan, stored(output, dead), source="the output and dead-letter tables hold",
               outcome="the ledger was not committed. Investigate before re-running")
    commit = keyed_commit(plan.table_uri, plan.pipeline, plan.batch_id, store) if tallies is None else None
    if tallies is not None:
        good = {tp: t.records - t.bad for tp, t in tallies.items()}
    elif commit is None or commit.records is None:
        raise ReconciliationError(
            f"batch {plan.batch_id}: the output {plan.table_uri} holds the batch's marker but no commit of the batch "
            f"with its counts among its last 100; the ledger was not committed. Investigate before re-running.",
            pipeline=plan.pipeline)
    else:
        good = commit.records
    filtered = {}
    for r in plan.ranges:
        kept, bad = (output[r.tp].records if r.tp in output else 0), (dead[r.tp].records if r.tp in dead else 0)
        expected_bad = tallies[r.tp].bad if tallies is not None and r.tp in tallies else bad
        filtered[r.tp] = good.get(r.tp, 0) - kept
        if filtered[r.tp] < 0 or bad != expected_bad or good.get(r.tp, 0) + bad > r.size:
            raise ReconciliationError(
                f"{r.tp}: batch {plan.batch_id} read {good.get(r.tp, 0)} good records of [{r.start}, {r.end}) but the "
                f"output holds {kept} distinct offsets of them and the dead-letter table {bad}; the ledger was not "
                f"committed. Investigate before re-running.", pipeline=plan.pipeline)
    counts = {r.tp: (good.get(r.tp, 0) + (dead[r.tp].records if r.tp in dead else 0),
                     dead[r.tp].records if r.tp in dead else 0) for r in plan.ranges}
    fault_injection.crash_soon(fault_injection.DURING_LEDGER_COMMIT)
    changed = Ledger(plan.ledger_uri, store).mark_committed(plan.pipeline, plan.batch_id, counts, filtered=filtered)
    log.info("pipeline '%s': batch %d %s in the ledger (%d records, %d dead letters, %d filtered by the transform)",
             plan.pipeline, plan.batch_id, "committed" if changed else "was already committed",
             sum(c for c, _ in counts.values()), sum(d for _, d in counts.values()), sum(filtered.values()))
    return changed
