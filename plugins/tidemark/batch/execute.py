"""Execute: the Spark part of a batch, given a SparkSession. Reads exactly the frozen ranges,
writes dead letters and the output with the batch's idempotency marker (the output commit is the
commit point), then finalizes. The Spark job (``tidemark_spark.ingest``) only parses its arguments,
builds the session and calls ``execute_batch``; tests call it with their own session.

Three write paths:

* raw values: one pass over Kafka writes the output while Spark counts what it read;
* values that can be bad (JSON or Avro, size limits): one pass over Kafka writes the good records
  (the commit point) while Spark counts the records and tallies the bad ones per partition, with the
  hash buckets of their coordinates; under ``on_bad_record: fail`` the first bad record fails that job,
  so Delta commits nothing. Then, per partition, the span from the first bad record to the last is
  read again and only the records of those buckets decoded, to write the dead letters. A crash
  between the two leaves the dead letters to the next attempt: recovery executes such a batch
  again, and the job completes the dead letters without touching the output (``complete_dead_letters``);
* re-reads that are deduplicated (backfills, replays): cache, count good and bad records per
  partition and check them against the frozen ranges before anything is written; then dead
  letters, then the output.

Every path ends with ``finalize_batch``, which checks what the tables hold before the ledger commit.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping

from tidemark import crash, spark_io, spark_records, spark_tally, storage
from tidemark.batch import carried, keyed_transform, transformed
from tidemark.batch.finalize import finalize_batch
from tidemark.batch.plan import BatchPlan
from tidemark.batch.read_checks import bad_records_error, cached_and_counted, checked, kafka_errors
from tidemark.batch.tables import Tally, dead_letters_settled, output_txn_version
from tidemark.errors import (
    PipelineBusyError,
    PlanMismatchError,
)
from tidemark.ledger import Ledger
from tidemark.offsets import OffsetRange, TopicPartition, describe_ranges
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


def check_plan_is_frozen(plan: BatchPlan, store: ObjectStore | None = None) -> None:
    """The job only executes what the ledger froze, for the run that owns it: the same batch id,
    exactly its ranges, the same owner."""
    state = Ledger(plan.ledger_uri, store).state(plan.pipeline)
    if state.pending_batch_id != plan.batch_id or state.pending_ranges != sorted(plan.ranges):
        raise PlanMismatchError(
            f"batch {plan.batch_id} handed to the ingest job is not the ledger's pending batch "
            f"({state.pending_batch_id}); refusing to read a range the ledger did not freeze. "
            f"Re-run the plan task.", pipeline=plan.pipeline)
    if state.pending_owner != plan.owner:
        raise PipelineBusyError.held_by(
            plan.pipeline, f"batch {plan.batch_id} now belongs to run '{state.pending_owner}', not to this run "
                           f"('{plan.owner}')", "the ingest job checks ownership before reading")


def execute_batch(spark, plan: BatchPlan, properties: Mapping[str, str], store: ObjectStore | None = None) -> None:
    """Execute one frozen batch with the given SparkSession and commit it: read exactly its ranges
    from Kafka (with the plan's isolation level), write the dead letters and the output (the commit point),
    then finalize (ledger commit). A batch whose marker is already in the output is only finalized. Idempotent.
    ``store``: the object store of tables on S3 (delta-rs' reads of the ledger and the markers)."""
    isolation_level = plan.isolation_level
    marker = output_txn_version(plan.table_uri, plan.pipeline, store)
    if marker is not None and marker >= plan.batch_id:
        log.warning("pipeline '%s': batch %d is already in the output table; only %sthe ledger %s brought up to "
                    "date", plan.pipeline, plan.batch_id, "the dead letters and " if plan.format.can_reject else "",
                    "are" if plan.format.can_reject else "is")
        if plan.format.can_reject:
            complete_dead_letters(spark, plan, properties, isolation_level, store)
        finalize_batch(plan, store=store)
    else:
        check_plan_is_frozen(plan, store)
        log.info("pipeline '%s': batch %d: reading %d offsets of %d partition(s) from Kafka", plan.pipeline,
                 plan.batch_id, plan.total_offsets, len(plan.ranges))
        crash.crash_when_spark_is_busy(crash.DURING_READ, spark)
        rows = _read_rows(spark, plan, properties, isolation_level)
        if plan.format.keyed:
            finalize_batch(plan, tallies=write_keyed(spark, rows, plan, store), store=store)
        elif plan.format.transform:
            if plan.dedupe:
                rows = spark_io.drop_already_written(spark, rows, plan, store)
            finalize_batch(plan, tallies=transformed.write(spark, rows, plan, store), store=store)
        elif plan.dedupe:
            rows = spark_io.drop_already_written(spark, rows, plan, store)
            finalize_batch(plan, tallies=write_counted_first(rows, plan), store=store)
        elif plan.format.can_reject:
            counted = write_checked_in_one_pass(spark, rows, plan, properties, isolation_level, store)
            if counted is None:  # another attempt committed the output meanwhile
                complete_dead_letters(spark, plan, properties, isolation_level, store)
                finalize_batch(plan, store=store)
            else:
                finalize_batch(plan, records_read=counted.records_read, bad_read=counted.bad_records, store=store)
        else:
            finalize_batch(plan, records_read=write_in_one_pass(rows, plan), store=store)
    crash.crash_point(crash.AFTER_LEDGER_COMMIT)


def write_counted_first(rows, plan: BatchPlan) -> dict[TopicPartition, Tally]:
    """Values that can be bad, and re-reads that are deduplicated (backfills, replays): cache the
    batch, count good and bad records per partition and check them against the frozen ranges before
    anything is written, then write the dead letters and the output (the commit point). A batch left
    with no record (everything already in the output) makes no commit at all, as an empty
    incremental run makes none. Returns the counts for the reconciliation."""
    rows, tallies, bad = cached_and_counted(rows, plan)
    try:
        if not any(t.records for t in tallies.values()):
            log.info("pipeline '%s': batch %d: every record of its ranges is already in the output or the dead "
                     "letters; no table is written", plan.pipeline, plan.batch_id)
            return tallies
        if bad:
            spark_io.write_dead_letters(rows, plan)
            log.info("pipeline '%s': %d dead letters written to %s", plan.pipeline, bad, plan.dead_letter_uri)
        crash.crash_point(crash.AFTER_DEAD_LETTERS)
        spark_io.write_output(rows, plan)
        log.info("pipeline '%s': batch %d committed to %s", plan.pipeline, plan.batch_id, plan.table_uri)
        crash.crash_point(crash.AFTER_OUTPUT_COMMIT)
    finally:
        rows.unpersist()
    return tallies


def write_keyed(spark, rows, plan: BatchPlan, store: ObjectStore | None = None) -> dict[TopicPartition, Tally]:
    """A keyed table (``tidemark.keyed``): one pass over Kafka reduces the batch to the newest change per key
    (cached: the check and the MERGE read it) while it counts good and bad records per partition, which are
    checked before anything is written; changes at offsets the table already applied (below the ledger's high
    water) are skipped, so a re-read changes nothing. Then one MERGE, then the dead letters, read again from Kafka
    (recovery completes them after a kill, as for values written in one pass). The MERGE commit carries the marker
    and the counts, which finalize reads back after a crash. A transformed batch, or one of more than
    ``spark_tally.OBSERVED_PARTITIONS`` partitions, is cached and counted first instead, as for re-reads."""
    from tidemark import spark_keyed, spark_markers
    from tidemark.keyed import KeyedSpec
    from tidemark.records import output_columns

    spec, fmt = KeyedSpec.from_dict(plan.format.keyed or {}), plan.format
    columns, add_columns, widen = output_columns(fmt, plan.partition_by), fmt.add_columns, fmt.widen
    if fmt.transform:  # checked before the read
        columns, add_columns, widen = keyed_transform.check(spark, rows, plan, spec, store)
    # One pass: the read tallied while it is reduced to the newest change per key, nothing of it cached but
    # that. A transform counts what it filters from the cached batch, and many partitions would cost too many
    # aggregates per record: the batch is then cached and tallied first.
    one_pass = not fmt.transform and len(plan.ranges) <= spark_tally.OBSERVED_PARTITIONS
    tallies, bad, filtered, newest = {}, 0, None, None
    if not one_pass:
        rows, tallies, bad = cached_and_counted(rows, plan)
    try:
        applied = Ledger(plan.ledger_uri, store).state(plan.pipeline).high_water
        if one_pass:
            changes, observed = spark_tally.observe_by_partition(rows, plan)
        else:
            changes, filtered = (keyed_transform.changes(spark, rows, plan, spec) if fmt.transform else (rows, None))
        newest = spark_keyed.newest_changes(changes, spec, applied)
        if not spec.by_kafka_position:  # an upsert older than a delete the table remembers changes nothing
            newest = spark_markers.against_markers(spark, newest, spec, plan.table_uri, store)
        newest = newest.persist()  # read by the check and the MERGE
        if one_pass:
            tallies, bad = _reduced_and_tallied(plan, rows, newest, observed)
        exists = storage.open_table(plan.table_uri, store) is not None
        if widen and exists:
            _widen_keyed(spark, plan, widen)
        if spec.by_kafka_position:
            with kafka_errors(plan):
                spark_keyed.check_one_partition_per_key(newest, spec, plan.pipeline)
        metadata = plan.commit_metadata({tp: t.records - t.bad for tp, t in tallies.items()}, filtered)
        if not spec.by_kafka_position:  # before the commit point: a retry of the frozen batch writes them again
            with kafka_errors(plan):
                spark_markers.remember(spark, newest, spec, plan.table_uri, plan.batch_id, store)
        _merge_newest(spark, plan, spec, newest, columns, metadata, add_columns=add_columns, exists=exists)
        log.info("pipeline '%s': batch %d merged into %s (%d records read, %d bad)", plan.pipeline, plan.batch_id,
                 plan.table_uri, sum(t.records for t in tallies.values()), bad)
        crash.crash_point(crash.AFTER_OUTPUT_COMMIT)
        if bad:  # after the MERGE, as for a transform: a MERGE that refuses the batch leaves nothing written
            with kafka_errors(plan):  # from the cached batch, or (one pass) a second read of Kafka
                spark_io.write_dead_letters(rows, plan)
        crash.crash_point(crash.AFTER_DEAD_LETTERS)
    finally:
        if not one_pass:
            rows.unpersist()
        if newest is not None:
            newest.unpersist()
    return tallies


def _merge_newest(spark, plan: BatchPlan, spec, newest, columns: list[str], metadata: str, *, add_columns: bool,
                  exists: bool) -> None:
    """The one commit of a keyed batch, with its marker: a MERGE of the newest changes, or, for the batch that
    creates the table, an append of its newest upserts (as a MERGE into nothing would)."""
    from tidemark import spark_keyed

    with kafka_errors(plan):
        if exists:
            spark_keyed.merge(spark, newest, spec, plan.table_uri, columns, app_id=plan.pipeline,
                              version=plan.batch_id, metadata=metadata, add_columns=add_columns)
        else:
            spark_io.append_marked(newest.where(f"{spark_keyed.OP} = 'u'").select(*columns), plan.table_uri,
                                   app_id=plan.pipeline, version=plan.batch_id, metadata=metadata,
                                   pipeline=plan.pipeline, partition_by=plan.partition_by,
                                   refused=f"batch {plan.batch_id}: another writer created {plan.table_uri} "
                                           f"at the same moment; the next run finds the batch or reads it again")


def _reduced_and_tallied(plan: BatchPlan, rows, newest, observed) -> tuple[dict[TopicPartition, Tally], int]:
    """Compute the newest changes (cached) in the one pass over Kafka that also tallies the batch per partition
    (``spark_tally.observe_by_partition``), then check the tallies as ``cached_and_counted`` does, before anything
    is written. Returns them and the number of bad records."""
    with kafka_errors(plan):
        newest.count()
        counted = observed()
        if counted is None:  # the counts came back empty (seen when every change was already applied: a replay)
            log.info("pipeline '%s': batch %d: Spark returned no counts with the pass; the batch is counted by "
                     "reading it again", plan.pipeline, plan.batch_id)
            tallies, records = spark_io.tally(rows), None
        else:
            records, parts = counted
            tallies = {tp: Tally(*part) for tp, part in parts.items()}
    return tallies, checked(plan, rows, tallies, records)


def _widen_keyed(spark, plan: BatchPlan, widen: dict[str, str]) -> None:
    """A keyed table's widened columns (``schema_changes``: a widening the plan found) are widened before its
    MERGE, which cannot change a column's type: one overwrite commit of the table with those columns cast,
    without the batch's marker, changing no value. A crash after it leaves a widened table and the batch not
    applied; the retry finds the columns widened and only MERGEs."""
    import json

    metadata = json.dumps({"tidemark_widening": {"pipeline": plan.pipeline, "before_batch": plan.batch_id,
                                                 "columns": widen}})
    with kafka_errors(plan):
        widened = spark_io.widen_in_place(spark, plan.table_uri, widen, plan.partition_by, metadata)
    if widened:
        log.info("pipeline '%s': batch %d widened %s of %s before its MERGE", plan.pipeline, plan.batch_id,
                 ", ".join(f"{c} to {widen[c]}" for c in widened), plan.table_uri)


def _read_rows(spark, plan: BatchPlan, properties: Mapping[str, str], isolation_level: str):
    raw = spark_io.read_ranges(spark, spark_io.kafka_source_options(plan, properties, isolation_level))
    return spark_records.to_rows(raw, plan.format, plan.batch_id, dt.datetime.now(dt.UTC))


def write_checked_in_one_pass(spark, rows, plan: BatchPlan, properties: Mapping[str, str],
                              isolation_level: str, store: ObjectStore | None = None) -> spark_tally.OnePass | None:
    """Values that can be bad: one pass over Kafka writes the good records (the commit point) while
    Spark counts every record and the bad ones, and notes where they lie; under ``on_bad_record:
    fail`` a bad record fails the job before Delta commits. Then the dead letters: from the bad records
    the pass carried when it could carry them all (``tidemark.batch.carried``: no Spark job), else only
    the offsets of each partition that hold them are read again. Returns what Spark counted, for the
    reconciliation (None when the output already held the batch, so no job ran to count)."""
    good = spark_io.fail_on_bad_records(rows) if plan.format.on_bad_record == "fail" else rows
    try:
        with kafka_errors(plan):
            written = spark_tally.write_output_tallying(good, plan)
    except Exception as exc:
        failure = spark_io.jvm_failure(exc)
        if failure is None or failure.kind != "bad_record":
            raise
        raise bad_records_error(plan, rows) from None
    if written is None:
        log.warning("pipeline '%s': batch %d was already in %s (Delta skipped the write by its marker)",
                    plan.pipeline, plan.batch_id, plan.table_uri)
        return None
    log.info("pipeline '%s': batch %d committed to %s (%d records read, %d bad, from %d offsets)", plan.pipeline,
             plan.batch_id, plan.table_uri, written.records_read, written.bad_records, plan.total_offsets)
    crash.crash_point(crash.AFTER_OUTPUT_COMMIT)
    # No spans although Spark counted bad records: finalize_batch refuses the batch
    spans = bad_spans(plan, written.bad_spans) if written.bad_records else []
    if spans and not (written.carried is not None and _write_carried(spark, plan, written, store)):
        only = dataclasses.replace(plan, ranges=spans)
        again = _read_rows(spark, only, properties, isolation_level)
        buckets = written.bad_buckets
        sifted = len(buckets) <= spark_tally.BAD_BUCKETS // 4  # else most records would pass: decode them all
        if sifted:
            again = again.where(spark_tally.in_buckets(buckets))  # Spark filters before it decodes
        with kafka_errors(plan):
            spark_io.write_dead_letters(again, plan)
        log.info("pipeline '%s': %d dead letters written to %s (read again: %s; decoded again: %s)", plan.pipeline,
                 written.bad_records, plan.dead_letter_uri, describe_ranges(only.ranges),
                 f"the records of {len(buckets)} of {spark_tally.BAD_BUCKETS} buckets" if sifted else "every record")
    crash.crash_point(crash.AFTER_DEAD_LETTERS)
    return written


def _write_carried(spark, plan: BatchPlan, written: spark_tally.OnePass, store: ObjectStore | None) -> bool:
    """The dead letters from the bad records the pass carried; False when they must be read again instead
    (nothing committed): the table cannot take them as carried, or Spark commits to it on object storage with a
    log store delta-rs does not share (``carried.beside_spark``)."""
    scheme = storage.spark_uri(plan.dead_letter_uri).split(":", 1)[0].lower()
    log_store = (spark.conf.get(f"spark.delta.logStore.{scheme}.impl", None)
                 if storage.is_object_store(plan.dead_letter_uri) else None)
    if not carried.beside_spark(plan.dead_letter_uri, log_store):
        log.info("pipeline '%s': batch %d: Spark commits to %s with %s, which delta-rs does not share; the dead "
                 "letters are read again and written by Spark", plan.pipeline, plan.batch_id, plan.dead_letter_uri,
                 log_store or "Delta's default log store")
        return False
    try:
        wrote = carried.write(plan, written.carried or [], store)
    except carried.UnfitTableError as exc:
        log.warning("pipeline '%s': batch %d: the dead-letter table cannot take the carried bad records (%s); they "
                    "are read again from Kafka", plan.pipeline, plan.batch_id, exc)
        return False
    if wrote:
        log.info("pipeline '%s': %d dead letters written to %s (carried by the pass: Kafka not read again)",
                 plan.pipeline, written.bad_records, plan.dead_letter_uri)
    else:
        log.warning("pipeline '%s': batch %d: the dead letters were already in %s (another attempt wrote them)",
                    plan.pipeline, plan.batch_id, plan.dead_letter_uri)
    return True


def bad_spans(plan: BatchPlan, spans: Mapping[TopicPartition, tuple[int, int]]) -> list[OffsetRange]:
    """What to read again for the dead letters: per partition with bad records, the offsets that
    hold them all (``OnePass.bad_spans``), within its range. A burst of bad records (a broken deploy of
    a producer) costs a read of the pages it spans, not of the batch."""
    again = []
    for r in plan.ranges:
        if r.tp in spans:
            start, end = max(r.start, spans[r.tp][0]), min(r.end, spans[r.tp][1])
            if start < end:
                again.append(OffsetRange(r.topic, r.partition, start, end))
    return again


def complete_dead_letters(spark, plan: BatchPlan, properties: Mapping[str, str], isolation_level: str,
                          store: ObjectStore | None = None) -> None:
    """The output holds the batch; its dead letters may not (an attempt died between the two commits).
    Unless the dead-letter table's marker shows them written, or the output holds a good record for
    every offset of the batch's ranges (so none can be bad), read the batch again (only this batch's
    owner may) and write its bad records, if any. Idempotent: Delta skips a second write by the marker."""
    if dead_letters_settled(plan.table_uri, plan.dead_letter_uri, plan.pipeline, plan.batch_id, plan.total_offsets,
                            store):
        return
    check_plan_is_frozen(plan, store)
    rows = _read_rows(spark, plan, properties, isolation_level)
    if plan.dedupe:
        rows = spark_io.drop_already_written(spark, rows, plan, store)
    with kafka_errors(plan):
        if spark_io.has_bad_rows(rows):
            spark_io.write_dead_letters(rows, plan)
            log.warning("pipeline '%s': batch %d: the dead letters an earlier attempt did not write are written to "
                        "%s", plan.pipeline, plan.batch_id, plan.dead_letter_uri)
    crash.crash_point(crash.AFTER_DEAD_LETTERS)


def write_in_one_pass(rows, plan: BatchPlan) -> int | None:
    """Raw values cannot be bad: one pass over Kafka writes the output (the commit point) while
    Spark counts what it read. The tables are then checked against the frozen ranges and that count
    before the ledger commit (finalize_batch). Returns the count (None if Delta skipped the write:
    the output already held the batch)."""
    crash.crash_point(crash.AFTER_DEAD_LETTERS)  # no dead letters in this format; the point stays reachable
    with kafka_errors(plan):
        records_read = spark_io.write_output_counting(rows, plan)
    if records_read is None:
        log.warning("pipeline '%s': batch %d was already in %s (Delta skipped the write by its marker)",
                    plan.pipeline, plan.batch_id, plan.table_uri)
    else:
        log.info("pipeline '%s': batch %d committed to %s (%d records read from %d offsets)", plan.pipeline,
                 plan.batch_id, plan.table_uri, records_read, plan.total_offsets)
    crash.crash_point(crash.AFTER_OUTPUT_COMMIT)
    return records_read
